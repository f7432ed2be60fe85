"""What the recording app tells the rest of the harness. Recording turns a conversation into drafts and knows nothing
of runs (it must not import them); what a draft needs from elsewhere — a conversation imported from a trace has its
model answers written as the draft's recording, which takes the runs app's case runner — hangs on this signal."""

from django.dispatch import Signal

# Sent once the drafts of a conversation are stored, with `conversation`, `cases` (the drafts, in order) and
# `slices` ((name, first_turn, last_turn) per draft). A receiver returns None or one note per draft ("" for none),
# which is added to that draft's warnings for the reviewer.
drafts_stored = Signal()
