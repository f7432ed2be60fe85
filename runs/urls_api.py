from django.urls import path

from runs.api import (
    ModelListApi,
    ResultDetailApi,
    ResultFreezeApi,
    RunApi,
    RunBlessApi,
    RunBulkDeleteApi,
    RunCancelApi,
    RunResumeApi,
    RunsApi,
    RunUnblessApi,
)

app_name = "runs-api"

urlpatterns = [
    path("models/", ModelListApi.as_view(), name="models"),
    path("runs/", RunsApi.as_view(), name="runs"),
    path("runs/delete/", RunBulkDeleteApi.as_view(), name="runs-delete"),
    path("runs/<int:run_id>/", RunApi.as_view(), name="run"),
    path("runs/<int:run_id>/cancel/", RunCancelApi.as_view(), name="run-cancel"),
    path("runs/<int:run_id>/resume/", RunResumeApi.as_view(), name="run-resume"),
    path("runs/<int:run_id>/bless/", RunBlessApi.as_view(), name="run-bless"),
    path("runs/<int:run_id>/unbless/", RunUnblessApi.as_view(), name="run-unbless"),
    path("runs/<int:run_id>/results/<int:result_id>/", ResultDetailApi.as_view(), name="result"),
    path("runs/<int:run_id>/results/<int:result_id>/freeze/", ResultFreezeApi.as_view(), name="result-freeze"),
]
