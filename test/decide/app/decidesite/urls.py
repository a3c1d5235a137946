from django.urls import re_path

from decidesite import views
from oclapi.views import MatchView, RerankView

# The shapes of OCL's routes: the trailing slash optional, "$" literal.
urlpatterns = [
    re_path(r"^concepts/\$match/?$", MatchView.as_view(heavy=views.run_heavy)),
    re_path(r"^concepts/\$rerank/?$", RerankView.as_view(heavy=views.run_heavy)),
    re_path(r"^v2/concepts/\$match/?$", views.DecoratedMatchView.as_view()),
]
