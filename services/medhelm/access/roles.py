"""Roles, principals and the access policy (``access.yaml``): who may see what.

* **viewer** — aggregates only: leaderboard, intervals, heatmap, costs (what redacted mode shows).
* **analyst** — also instance text: prompts, answers, references, judge rationales (audited).
* **admin** — everything an analyst may, plus the audit trail in the dashboard.
* **clinician** — a grant beside that ladder, not a rung on it: the Review page (the instance text of
  jury-scored benchmarks, blind to which model wrote each answer; the clinician's ratings are stored)
  and the jury-calibration aggregates. A clinician in no other group sees no leaderboard, no model
  name and no drill-down, so the ratings stay blind; a clinician who is also an analyst may review, but
  such ratings are stored as not blind (``Principal.blind``).

The identity provider's group (or role) claim maps to roles in ``access.yaml``; the highest role of
any matching group applies. A signed-in user in no listed group gets ``default_role`` (``none`` =
refused). A release listed under ``releases`` is visible only to members of its groups (and admins).

Failure semantics: a bad ``access.yaml`` (checked against a typed schema, ``schemas.py``) is a
``ConfigError`` naming the file, line and field; a refused
action is ``AccessDenied`` (one line naming the role or release, never patient text).
"""

from __future__ import annotations

import fnmatch
import getpass
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from medhelm.errors import ConfigError, MedhelmError
from medhelm.schemas import NameText, Strict, Text, check


class Role(IntEnum):
    NONE = 0
    VIEWER = 1
    ANALYST = 2
    ADMIN = 3

    @classmethod
    def parse(cls, text: str, *, path: Path | None = None, field_name: str = "role") -> Role:
        try:
            return cls[str(text).strip().upper()]
        except KeyError:
            raise ConfigError(f"unknown role '{text}' (one of none, viewer, analyst, admin; under roles also "
                              "clinician)", path=path, field=field_name) from None

    @classmethod
    def is_clinician(cls, text: str) -> bool:
        """``clinician`` in ``access.yaml`` is the review grant, kept apart from the viewer..admin ladder."""
        return str(text).strip().lower() == CLINICIAN

    @property
    def label(self) -> str:
        return self.name.lower()


CLINICIAN = "clinician"  # the review grant's name in access.yaml and in audit/rating rows


class AccessDenied(MedhelmError):
    """The principal may not do this (wrong role, or a release restricted to other groups)."""


@dataclass(frozen=True)
class Principal:
    """Who is asking: the identity provider's subject (or the local OS user), its groups and its role.

    ``restricted`` carries the policy's release restrictions ((release pattern, groups), ...) so the
    store's readers can decide without the policy object."""

    subject: str
    role: Role
    groups: tuple[str, ...] = ()
    source: str = "oidc"  # oidc | local (auth off, loopback) | cli
    name: str = ""
    restricted: tuple[tuple[str, tuple[str, ...]], ...] = ()
    clinician: bool = False  # the review grant (a group under roles.clinician), beside ``role``

    @classmethod
    def local(cls, role: Role = Role.ADMIN, source: str = "local", clinician: bool = False) -> Principal:
        """The person at this machine (auth off on loopback, or the CLI): named by the OS user. The dashboard
        on loopback passes ``clinician=True``: they may review too (their ratings are stored as not blind)."""
        try:
            user = getpass.getuser()
        except Exception:  # noqa: BLE001 - no passwd entry in a container
            user = "unknown"
        return cls(subject=f"{source}:{user}", role=role, source=source, name=user, clinician=clinician)

    @property
    def label(self) -> str:
        """The role as the audit trail and the ratings name it: ``viewer``, ``clinician``, ``analyst+clinician``."""
        if not self.clinician:
            return self.role.label
        return CLINICIAN if self.role == Role.NONE else f"{self.role.label}+{CLINICIAN}"

    @property
    def blind(self) -> bool:
        """May this principal link an answer to its model anywhere (the drill-down)? Not blind if so."""
        return self.role < Role.ANALYST

    def require_review(self, release: str) -> None:
        """The Review page's text (blinded) and storing ratings: the clinician grant, and the release visible."""
        if not self.clinician:
            raise AccessDenied(f"clinician review needs the {CLINICIAN} role; {self.subject} has "
                               f"{self.role.label if self.role else 'no role'}")
        self.require_release(release)

    def require_aggregates(self, release: str) -> None:
        """Aggregates (leaderboard, agreement figures): viewer or above, or a clinician."""
        if not self.clinician:
            self.require(Role.VIEWER, "aggregates")
        self.require_release(release)

    def capped(self, role: Role) -> Principal:
        """The same principal with at most ``role`` (redacted mode caps everyone at viewer). A cap below
        analyst means no instance text at all, so it ends the review grant too."""
        return replace(self, role=min(self.role, role), clinician=self.clinician and role >= Role.ANALYST)

    def may_see_release(self, release: str) -> bool:
        if self.role >= Role.ADMIN:
            return True
        for pattern, groups in self.restricted:
            if fnmatch.fnmatchcase(release, pattern):
                return bool(set(groups) & set(self.groups))
        return True

    def require(self, role: Role, what: str) -> None:
        if self.role < role:
            raise AccessDenied(f"{what} needs the {role.label} role; {self.subject} has "
                               f"{self.role.label if self.role else 'no role'}")

    def require_release(self, release: str) -> None:
        if not self.may_see_release(release):
            raise AccessDenied(f"release '{release}' is restricted to named groups; {self.subject} is in none of them")

    def require_text(self, release: str) -> None:
        """Instance text of ``release``: analyst or admin, and the release visible to this principal."""
        self.require(Role.ANALYST, "instance text")
        self.require_release(release)


@dataclass(frozen=True)
class AccessPolicy:
    """``access.yaml``: which claim holds the groups, group -> role, release -> groups."""

    groups_claim: str = "groups"
    roles: Mapping[str, Role] = field(default_factory=dict)  # group name -> role
    clinicians: tuple[str, ...] = ()  # groups holding the review grant (roles.clinician)
    default_role: Role = Role.NONE
    releases: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (release name or glob, groups)
    subject_claim: str = "email"  # what the audit trail names a user by (falls back to sub)

    @classmethod
    def load(cls, path: Path) -> AccessPolicy:
        from medhelm.files import load_yaml_doc

        doc = load_yaml_doc(path, missing="access policy file not found")
        if doc.data is not None and not isinstance(doc.data, dict):
            raise ConfigError("expected a mapping (groups_claim, roles, default_role, releases)", path=path)
        return cls.from_dict(doc.data or {}, path=path, doc=doc)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], *, path: Path | None = None, doc: Any = None) -> AccessPolicy:
        """A policy from its mapping, checked against the typed schema (``schemas.py``)."""
        parsed = check(_PolicyFile, dict(raw), path=path, doc=doc)
        roles: dict[str, Role] = {}
        clinicians: list[str] = []
        for role_name, groups in parsed.roles.items():
            if Role.is_clinician(role_name):  # the review grant, apart from the ladder
                clinicians += groups
                continue
            for g in groups:
                roles[g] = max(Role[role_name.upper()], roles.get(g, Role.NONE))
        return cls(groups_claim=parsed.groups_claim, roles=roles, clinicians=tuple(clinicians),
                   default_role=Role[parsed.default_role.upper()],
                   releases=tuple((name, tuple(groups)) for name, groups in parsed.releases.items()),
                   subject_claim=parsed.subject_claim)

    def principal(self, claims: Mapping[str, Any]) -> Principal:
        """The principal an ID token's claims describe (role NONE when no group maps to a role)."""
        groups = _claim_list(claims.get(self.groups_claim))
        role = max([self.roles.get(g, Role.NONE) for g in groups] + [self.default_role])
        subject = str(claims.get(self.subject_claim) or claims.get("sub") or "unknown")
        return Principal(subject=subject, role=role, groups=tuple(groups), source="oidc",
                         name=str(claims.get("name") or ""), restricted=self.releases,
                         clinician=bool(set(groups) & set(self.clinicians)))


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


RoleName = Annotated[Literal["none", "viewer", "analyst", "admin"], BeforeValidator(_lower)]
# a key of ``roles:``: a rung of the ladder, or ``clinician`` (the review grant; never a default_role)
RoleKey = Annotated[Literal["none", "viewer", "analyst", "admin", "clinician"], BeforeValidator(_lower)]
Groups = Annotated[list[Text], BeforeValidator(_one_or_many), Field(max_length=10_000)]


class _PolicyFile(Strict):
    """``access.yaml``: every key known, every type checked (``schemas.py``)."""

    groups_claim: Text = "groups"
    subject_claim: Text = "email"
    roles: dict[RoleKey, Groups] = {}
    default_role: RoleName = "none"
    releases: dict[NameText, Groups] = {}


def _claim_list(value: Any) -> list[str]:
    """A group claim as a list: providers send a list, a space/comma-separated string, or nothing."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in value.replace(",", " ").split() if v]
    if isinstance(value, Iterable):
        return [str(v) for v in value]
    return [str(value)]
