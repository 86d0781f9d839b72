from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from accounts.models import ApiKey, Organization
        from core.lookups import forget_lookups_when_saved

        forget_lookups_when_saved(ApiKey, Organization)
