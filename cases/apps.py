from django.apps import AppConfig


class CasesConfig(AppConfig):
    name = "cases"
    verbose_name = "Test cases"

    def ready(self) -> None:
        from cases import checks  # noqa: F401  (registers the check of mocks against their tools' schemas)
