"""Django's own admins (users, groups, API tokens) read ids like every other admin of agenttest: a changelist action
or filter naming something other than an id is refused instead of reaching the database (common/admin_ids.py)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from rest_framework.authtoken.admin import TokenAdmin
from rest_framework.authtoken.models import TokenProxy

from common.admin_ids import StrictIdsAdminMixin

for model, model_admin in ((User, UserAdmin), (Group, GroupAdmin), (TokenProxy, TokenAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, type(f"Strict{model_admin.__name__}", (StrictIdsAdminMixin, model_admin), {}))
