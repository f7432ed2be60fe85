from django.urls import path

from runs import views

app_name = "runs"

urlpatterns = [
    path("runs/", views.run_list_page, name="list"),
    path("runs/new/", views.run_trigger_page, name="new"),
    path("runs/cases-count.json", views.cases_count, name="cases-count"),
    path("runs/<int:run_id>/", views.run_page, name="detail"),
    path("runs/<int:run_id>/progress.json", views.run_progress, name="progress"),
    path("runs/<int:run_id>/cancel/", views.run_cancel_page, name="cancel"),
    path("runs/<int:run_id>/resume/", views.run_resume_page, name="resume"),
    path("runs/<int:run_id>/bless/", views.run_bless_page, name="bless"),
    path("runs/<int:run_id>/unbless/", views.run_unbless_page, name="unbless"),
    path("runs/<int:run_id>/results/<int:result_id>/", views.result_page, name="result"),
    path("runs/<int:run_id>/compare/", views.run_compare_page, name="compare"),
    path("runs/<int:run_id>/matrix.csv", views.matrix_csv, name="matrix-csv"),
    path("runs/<int:run_id>/junit.xml", views.junit_xml, name="junit"),
]
