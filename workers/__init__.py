"""The workers: rq jobs that take a chunk shipped by the collector, compute
attribute-level diffs against the stored records and apply them in one atomic
step (hashes, versions, streams, pub/sub)."""
