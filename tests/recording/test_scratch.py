import pytest
from agents.models import Agent
from agents.services import conversation_send, conversation_start
from agents.selectors import conversation_state_timeline

pytestmark = pytest.mark.django_db

def dump(c):
    for m in c.messages.order_by("seq"):
        print(m.seq, m.turn, m.role, m.agent and m.agent.name, m.function_name, m.arguments, m.trigger, m.outcome, repr(m.content[:120]), m.model)
    for t in conversation_state_timeline(conversation=c):
        print("STATE", t)

def test_it_dumps(demo_agents):
    c = conversation_start(agent=demo_agents["order-router"], initial_state={"customer_email": "bo@example.com"})
    for text in ["Where is my order #1042?", "Please cancel order 1043, my email is ana@example.com", "Can you cancel order 1047?", "Thanks!"]:
        conversation_send(conversation=c, text=text)
    dump(c)
