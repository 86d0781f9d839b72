"""Who may see what on the dashboard.

Staff see and manage every organization. Anyone else sees only the organizations they have a
role in (`accounts.Membership`): a viewer sees their runs, sessions, replays, Live and spend; an
admin also manages their keys and budgets. A signed-in user with neither is no dashboard user.

A page's decorator reads the signed-in user's `Access` once (`access_of`); the page hands its
organizations to the selectors, which filter by them; a run, key or image of another
organization is a 404, as if it did not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accounts.models import Membership


@dataclass(frozen=True)
class Access:
    staff: bool
    viewed: frozenset[int]  # the organizations seen (as viewer or admin); all of them for staff
    managed: frozenset[int]  # the organizations whose keys and budgets are managed

    @property
    def organizations(self) -> frozenset[int] | None:
        """The organizations seen, for selectors to filter by; None is every one (staff)."""
        return None if self.staff else self.viewed

    @property
    def managed_organizations(self) -> frozenset[int] | None:
        """The organizations managed; None is every one (staff)."""
        return None if self.staff else self.managed

    @property
    def manages_any(self) -> bool:
        """Whether the Keys, Budgets and Playground pages are for this user."""
        return self.staff or bool(self.managed)

    def sees(self, organization_id: int | None) -> bool:
        return self.staff or organization_id in self.viewed

    def manages(self, organization_id: int | None) -> bool:
        return self.staff or organization_id in self.managed


def access_of(user: Any) -> Access | None:
    """What `user` may see on the dashboard; None when nothing (anonymous, inactive, no role)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    if user.is_staff:
        return Access(staff=True, viewed=frozenset(), managed=frozenset())
    roles = list(Membership.objects.filter(user=user).values_list("organization_id", "role"))
    if not roles:
        return None
    return Access(
        staff=False,
        viewed=frozenset(organization for organization, _ in roles),
        managed=frozenset(
            organization for organization, role in roles if role == Membership.Role.ADMIN
        ),
    )
