from django.urls import re_path

from oclapi.views import MatchView, RerankView
from oclsim import views

# The shapes of OCL's routes: the trailing slash optional, "$" literal.
urlpatterns = [
    re_path(r"^user/?$", views.UserView.as_view()),
    re_path(r"^concepts/\$match/?$", MatchView.as_view(heavy=views.run_heavy)),
    re_path(r"^concepts/\$rerank/?$", RerankView.as_view(heavy=views.run_heavy)),
]
