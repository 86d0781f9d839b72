"""The admin for organizations, their members' dashboard roles and keys: a new key's secret is
shown once, never stored."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from accounts.models import ApiKey, Membership, Organization
from accounts.services import key_change_record, key_issue

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldGroups
    from django.utils.datastructures import _ListOrTuple


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin[Organization]):
    list_display = ["name", "budget_usd", "budget_period", "requests_per_minute", "created_at"]
    search_fields = ["name"]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin[Membership]):
    """Dashboard users' roles in organizations (staff need none)."""

    list_display = ["user", "organization", "role"]
    list_filter = ["role", "organization"]
    search_fields = ["user__username", "organization__name"]
    autocomplete_fields = ["user", "organization"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin[ApiKey]):
    # A key is created from an organization and a name by `key_create` (as `manage.py
    # createkey` does); its secret is shown once, on the page that answers the form, and is
    # never stored. Afterwards only the name and the revocation can change.
    list_display = ["prefix", "name", "organization", "budget_usd", "created_at", "revoked_at"]
    list_filter = ["organization"]
    readonly_fields = ["organization", "prefix", "digest", "created_at"]
    search_fields = ["prefix", "name"]

    # The secret of a key this admin just created, for the one page that shows it.
    _issued_secrets: weakref.WeakKeyDictionary[HttpRequest, str] = weakref.WeakKeyDictionary()

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> _FieldGroups:
        if obj is None:
            return ["organization", "name"]
        return super().get_fields(request, obj)

    def get_readonly_fields(
        self, request: HttpRequest, obj: ApiKey | None = None
    ) -> _ListOrTuple[str]:
        return [] if obj is None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        user = request.user
        assert isinstance(user, User)  # the admin lets only staff in
        if change:
            # One transaction: the change and its audit entry are saved together or not at all.
            with transaction.atomic():
                super().save_model(request, obj, form, change)
                key_change_record(key=obj, actor=user, changed=list(form.changed_data))
            return
        issued = key_issue(organization=obj.organization, name=obj.name, actor=user)
        obj.pk, obj.prefix, obj.digest = issued.key.pk, issued.key.prefix, issued.key.digest
        obj.created_at = issued.key.created_at
        obj._state.adding = False
        self._issued_secrets[request] = issued.secret

    def response_add(
        self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None
    ) -> HttpResponse:
        # The secret goes straight into this one page, never into a message (which the
        # cookie storage would keep on the client) nor the database.
        response = TemplateResponse(
            request,
            "accounts/admin_key_secret.html",
            {
                **self.admin_site.each_context(request),
                "key": obj,
                "secret": self._issued_secrets.pop(request),
                "opts": self.model._meta,
                "title": "API key created",
            },
        )
        response["Cache-Control"] = "no-store"
        return response
