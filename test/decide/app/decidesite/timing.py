"""Notes when the middlewares after this one start deciding on a view, so
the view can record how long they took (the limiter's added delay)."""
import time


class Timing:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        request.decide_t0 = time.monotonic()
        return None
