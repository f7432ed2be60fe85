from django.urls import path

from cases.api import CaseApi, CaseCopyApi, CaseDisableApi, CaseEnableApi, CasesApi, SuiteApi, SuitesApi

app_name = "cases-api"

urlpatterns = [
    path("suites/", SuitesApi.as_view(), name="suites"),
    path("suites/<int:suite_id>/", SuiteApi.as_view(), name="suite"),
    path("cases/", CasesApi.as_view(), name="cases"),
    path("cases/<int:case_id>/", CaseApi.as_view(), name="case"),
    path("cases/<int:case_id>/copy/", CaseCopyApi.as_view(), name="case-copy"),
    path("cases/<int:case_id>/enable/", CaseEnableApi.as_view(), name="case-enable"),
    path("cases/<int:case_id>/disable/", CaseDisableApi.as_view(), name="case-disable"),
]
