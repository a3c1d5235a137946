from django.urls import path

from reports import views

urlpatterns = [
    path("report/", views.ReportView.as_view()),  # heavy: the policy's route "report"
    path("reports/", views.ReportListView.as_view()),  # light: never asked about
]
