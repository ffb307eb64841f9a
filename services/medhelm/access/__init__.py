"""Who may see patient text: principals and roles (``roles``), the audit trail (``audit``), and the
callers allowed on the gRPC services (``medhelm.rpc.authz`` uses ``callers``).

Every door asks here before it hands out instance text (prompts, answers, references, judge
rationales): ``store.read.instances_page``/``paired_instances`` take a ``Principal``, refuse a role
below analyst or a release the principal may not see, and write an audit row before returning; if
that row cannot be written the text is not returned. Failure semantics: refusals are
``AccessDenied`` (a ``MedhelmError``: one line, never patient text), an audit failure is
``AuditError`` (the caller shows nothing).
"""

from medhelm.access.roles import AccessDenied, AccessPolicy, Principal, Role

__all__ = ["AccessDenied", "AccessPolicy", "Principal", "Role"]
