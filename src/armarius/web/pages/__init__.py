"""The web review pages for humans: one module per page group, on the framework in :mod:`.gate`.

To add a page group, write ``armarius/web/pages/<name>.py`` with ``routes(web) -> list[BaseRoute]``
(see the docstring of :mod:`armarius.web.pages.gate`), its templates in ``armarius/web/templates``,
and list the module here. Its JSON twin goes into ``API_ROUTES`` in :mod:`armarius.web.api`.
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from armarius.web.pages import audit, drafts, evidence, login, memory, queue, repairs, sessions
from armarius.web.pages.gate import Web

#: Every page group, in the order their routes are tried.
PAGE_MODULES = (login, queue, drafts, memory, audit, repairs, sessions, evidence)


def page_routes(web: Web) -> list[BaseRoute]:
    return [route for module in PAGE_MODULES for route in module.routes(web)]
