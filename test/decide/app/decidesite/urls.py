from django.urls import re_path

from decidesite import views
from oclapi.views import MatchView

# The shapes of OCL's routes: the trailing slash optional, "$" literal.
# $rerank is served by a ViewSet (its action bound by as_view), so the
# middleware's reading of a ViewSet route is under every test.
urlpatterns = [
    re_path(r"^concepts/\$match/?$", MatchView.as_view(heavy=views.run_heavy)),
    re_path(r"^concepts/\$rerank/?$", views.RerankViewSet.as_view({"post": "create"}, heavy=views.run_heavy)),
    re_path(r"^v2/concepts/\$match/?$", views.DecoratedMatchView.as_view()),
]
