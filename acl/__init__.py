"""Redis ACL administration for a site: the users and rules (``rules``) and the
credential files handed to users and services (``files``).  Driven by
``jobtap acl`` (cli/acl.py); see docs/security.md."""
