"""The conversations of stored spans a request had more of than it writes itself (traces.api), written by a worker."""

import logging

from celery import Task, shared_task
from django.db import DatabaseError, connection

from traces.conversations import IMPORT_CONVERSATIONS, trace_conversations_import

logger = logging.getLogger(__name__)
_RETRY_AFTER_SECONDS = 10
_RETRIES = 5


@shared_task(bind=True, name=IMPORT_CONVERSATIONS, acks_late=True, ignore_result=True)
def import_trace_conversations(self: Task, keys: list[str]) -> None:
    # Each conversation is mapped again from all its stored spans, so a message delivered twice, or one whose
    # conversations a later request wrote first, changes nothing.
    try:
        trace_conversations_import(keys=keys)
    except DatabaseError as exc:
        # A busy database, or the receiver creating the same conversation at that moment: again later, when the
        # conversation is there to be updated.
        logger.warning("%s conversation(s) of stored spans not written yet (%s); trying again", len(keys), exc)
        connection.close()
        if self.request.is_eager:
            raise
        raise self.retry(exc=exc, countdown=_RETRY_AFTER_SECONDS, max_retries=_RETRIES) from None
