"""The Flux backend's commands for the tiers: a full stat lists every state of
every user (``-a -A``), the probe only the jobs active within its window
(``--since=-Ns``, relative to the instance's clock)."""

from __future__ import annotations

import json
import math

from jobtap.collector.backends.flux import FluxBackend


def recording_flux(tmp_path):
    """A ``flux`` that notes its arguments and lists no job."""
    log = tmp_path / "argv.jsonl"
    script = tmp_path / "flux"
    script.write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "print(json.dumps({'jobs': []}))\n"
    )
    script.chmod(0o755)
    return script, log


def test_full_stat_and_probe_arguments(tmp_path):
    script, log = recording_flux(tmp_path)
    now = [1000.0]
    backend = FluxBackend(flux=str(script), clock=lambda: now[0], overlap=5)
    backend.stat_jobs()
    assert backend.probe(None).until == 1000.0  # a baseline: no command
    now[0] = 1012.3
    probe = backend.probe(1000.0)
    assert probe.until == 1012.3 and probe.records == {} and not probe.complete
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 2
    full, window = calls
    assert full[:3] == ["jobs", "-a", "-A"] and "--json" in full
    assert not any(arg.startswith("--since") for arg in full)
    assert window[:3] == ["jobs", "-a", "-A"]
    assert window[-1] == f"--since=-{math.ceil(12.3 + 5)}s"
