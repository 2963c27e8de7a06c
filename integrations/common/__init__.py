"""What every jobtap integration shares (``jobtap.integrations``): where the jobtap
Redis and site come from, and the rules that decide when an integration trusts
jobtap's cache and when it asks the scheduler the way the tool's own code does.

The integrations themselves are ``jobtap.psij`` (PSI/J executors), ``jobtap.parsl``
(Parsl providers) and ``jobtap.snakemake`` (a Snakemake executor); each imports its
tool, this package imports none (the SDK only).
"""
