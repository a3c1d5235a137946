from django.urls import re_path

from decidesite import views

# The shapes of OCL's routes: the trailing slash optional, "$" literal.
urlpatterns = [
    re_path(r"^concepts/\$match/?$", views.MatchView.as_view()),
    re_path(r"^concepts/\$rerank/?$", views.RerankView.as_view()),
    re_path(r"^v2/concepts/\$match/?$", views.DecoratedMatchView.as_view()),
]
