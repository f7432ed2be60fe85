from django.urls import path

from agenthost.api import (
    AgentApi,
    AgentsApi,
    ConversationDetailApi,
    ConversationsApi,
    ConversationStateApi,
    MessagesApi,
)

app_name = "agents-api"

urlpatterns = [
    path("agents/", AgentsApi.as_view(), name="agents"),
    path("agents/<int:agent_id>/", AgentApi.as_view(), name="agent"),
    path("conversations/", ConversationsApi.as_view(), name="conversations"),
    path("conversations/<int:conversation_id>/", ConversationDetailApi.as_view(), name="conversation"),
    path("conversations/<int:conversation_id>/messages/", MessagesApi.as_view(), name="messages"),
    path("conversations/<int:conversation_id>/state/", ConversationStateApi.as_view(), name="state"),
]
