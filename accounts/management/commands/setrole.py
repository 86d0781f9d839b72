from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Membership
from accounts.services import MembershipError, membership_remove, membership_set


class Command(BaseCommand):
    help = (
        "Give a dashboard user a role in an organization (viewer: its runs, sessions, replay, "
        "Live and spend; admin: also its keys and budgets), or take it away with --remove."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("organization", help="The organization's name.")
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--role", choices=Membership.Role.values, default=Membership.Role.VIEWER)
        group.add_argument("--remove", action="store_true", help="Take the user's role away.")

    def handle(
        self,
        *args: object,
        username: str,
        organization: str,
        role: str,
        remove: bool,
        **options: object,
    ) -> None:
        try:
            if remove:
                membership_remove(username=username, organization_name=organization)
                self.stdout.write(f"{username} has no role in {organization!r} now.")
                return
            membership_set(username=username, organization_name=organization, role=role)
        except MembershipError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{username} is {role} of {organization!r}.")
