from django.urls import path, re_path

from testsite import views

KINDS = ["apiview", "generic", "viewset", "drf_function", "django", "function"]

urlpatterns = [
    re_path(r"^concepts/\$match/?$", views.MatchView.as_view()),
    path("mw/apiview/heavy/", views.HeavyAPIView.as_view()),
    path("mw/generic/heavy/", views.HeavyGenericView.as_view()),
    path("mw/viewset/heavy/", views.HeavyViewSet.as_view({"post": "create"})),
    path("mw/drf_function/heavy/", views.heavy_drf_function),
    path("mw/django/heavy/", views.HeavyDjangoView.as_view()),
    path("mw/function/heavy/", views.heavy_function),
    path("mw/async/heavy/", views.heavy_async),
    path("mw/throttled/heavy/", views.ThrottledView.as_view()),
    path("pv/apiview/heavy/", views.PVAPIView.as_view()),
    path("pv/generic/heavy/", views.PVGenericView.as_view()),
    path("pv/viewset/heavy/", views.PVViewSet.as_view({"post": "create"})),
    path("pv/drf_function/heavy/", views.pv_drf_function),
    path("pv/django/heavy/", views.PVDjangoView.as_view()),
    path("pv/function/heavy/", views.pv_function),
    path("pv/async/heavy/", views.pv_async),
    path("pv/throttled/heavy/", views.PVThrottledView.as_view()),
]
