"""The shared room: what every app uses (input parsing, the API's error shape and permissions, admin and form helpers,
pattern checks, queue names, the broker ping). It imports Django, DRF and libraries only — never an app, never
`agenttest` — so any app may import it without pulling in the project's settings, Celery app or another app."""
