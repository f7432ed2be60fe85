from django.apps import apps
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agenttest.pages import favicon

urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/", include("agenthost.urls_api")),
    path("", include("agenthost.urls")),
]

# The harness mounts itself only when installed: the host works the same without it.
for app_label in ("cases", "runs", "recording"):
    if apps.is_installed(app_label):
        urlpatterns.insert(-1, path("api/", include(f"{app_label}.urls_api")))
        urlpatterns.insert(-1, path("", include(f"{app_label}.urls")))
# The OTLP receiver answers at the site's root (/v1/traces): exporters append that path to the base URL they are given.
if apps.is_installed("traces"):
    urlpatterns.insert(-1, path("", include("traces.urls")))

handler404 = "agenttest.pages.not_found_page"
