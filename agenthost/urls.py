from django.urls import path

from agenthost import views

app_name = "agents"

urlpatterns = [
    path("", views.index, name="index"),
    path("chat/", views.chat, name="chat"),
    path("conversations/", views.conversations, name="conversations"),
]
