from django.urls import path

from agenthost import views

app_name = "agents"

urlpatterns = [
    path("", views.index, name="index"),
    path("chat/", views.chat, name="chat"),
    path("chat/conversations/<int:conversation_id>/transcript/", views.chat_transcript, name="chat-transcript"),
    path("conversations/", views.conversations, name="conversations"),
    path("conversations/<int:conversation_id>/", views.conversation_page, name="conversation"),
]
