from django.urls import path

from recording import views

app_name = "recording"

urlpatterns = [
    path("conversations/<int:conversation_id>/record/", views.conversation_record, name="record"),
    path("conversations/<int:conversation_id>/extract/", views.conversation_extract, name="extract"),
]
