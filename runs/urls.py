from django.urls import path

from runs.web import exports, pages, side_by_side

app_name = "runs"

urlpatterns = [
    path("runs/", pages.run_list_page, name="list"),
    path("runs/new/", pages.run_trigger_page, name="new"),
    path("runs/cases-count.json", pages.cases_count, name="cases-count"),
    path("runs/<int:run_id>/", pages.run_page, name="detail"),
    path("runs/<int:run_id>/progress.json", pages.run_progress, name="progress"),
    path("runs/<int:run_id>/cancel/", pages.run_cancel_page, name="cancel"),
    path("runs/<int:run_id>/resume/", pages.run_resume_page, name="resume"),
    path("runs/<int:run_id>/bless/", pages.run_bless_page, name="bless"),
    path("runs/<int:run_id>/unbless/", pages.run_unbless_page, name="unbless"),
    path("runs/<int:run_id>/results/<int:result_id>/", pages.result_page, name="result"),
    path(
        "runs/<int:run_id>/results/<int:result_id>/side-by-side/",
        side_by_side.result_side_by_side_page,
        name="result-side-by-side",
    ),
    path("runs/<int:run_id>/results/<int:result_id>/models/", side_by_side.result_models_page, name="result-models"),
    path("runs/<int:run_id>/results/<int:result_id>/freeze/", pages.result_freeze_page, name="result-freeze"),
    path("runs/<int:run_id>/compare/", pages.run_compare_page, name="compare"),
    path("runs/<int:run_id>/matrix.csv", exports.matrix_csv, name="matrix-csv"),
    path("runs/<int:run_id>/junit.xml", exports.junit_xml, name="junit"),
]
