from django.urls import path
from rest_framework.routers import SimpleRouter

from pools.api.auth import TokenView
from pools.api.views import OrderViewSet, PoolViewSet

router = SimpleRouter(trailing_slash="/?")
router.register("pools", PoolViewSet, basename="pool")
router.register("orders", OrderViewSet, basename="order")

app_name = "api"
urlpatterns = [path("auth/token/", TokenView.as_view(), name="token"), *router.urls]
