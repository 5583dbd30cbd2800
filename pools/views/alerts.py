"""A pool's capacity alert page `/pools/<name>/alerts/`: the rules the pool's `spec.alerts` sets
(defaults filled in), its latest alert episodes, the silences in force, and for the team's leads
and platform admins a form to silence a rule until a time or end a silence. Another team's pool
is a 404 (`selectors.pool_get`); members and finance read it and get a 403 when they post."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from monitoring import selectors as monitoring_selectors
from monitoring import silences
from monitoring.alerts import alert_rules_of
from monitoring.models import AlertSilence
from pools.alerts_form import SilenceForm
from pools.core.alerting import RULES, RULES_BY_REASON, describe
from pools.core.errors import ValidationError
from pools.core.numbers import parse_whole_number
from pools.selectors import pools as selectors
from pools.views.base import htmx_render


@login_required
@require_http_methods(["GET", "POST"])
def pool_alerts(request, name: str):
    pool = selectors.pool_get(user=request.user, name=name)
    now = timezone.now()
    can_silence = silences.may_silence(request.user, pool)
    form = SilenceForm(request.POST or None, initial={"until": (now + timedelta(hours=4)).replace(second=0, microsecond=0)})
    if request.method == "POST":
        if not can_silence:
            raise PermissionDenied("only the team's leads and platform admins silence its pools' alerts")
        if "end" in request.POST:
            return silence_end(request, pool, now)
        if form.is_valid():
            try:
                silences.alert_silence_create(user=request.user, pool=pool, now=now, **form.cleaned_data)
            except ValidationError as exc:
                for error in exc.errors:
                    form.add_error(error.field if error.field in form.fields else None, error.message)
            else:
                title = RULES_BY_REASON[form.cleaned_data["rule"]].title
                messages.success(request, f"{title} alerts of {pool.name} silenced until {form.cleaned_data['until']:%Y-%m-%d %H:%M} UTC.")
                return HttpResponseRedirect(reverse("pools:alerts", args=[pool.name]))
    rules = alert_rules_of([pool])[pool.pk]
    context = {
        "pool": pool,
        "rules": [{"info": info, "rule": rules.rule(info.reason), "text": describe(info, rules.rule(info.reason))} for info in RULES],
        "silences": monitoring_selectors.silences_active(pool=pool, now=now),
        "episodes": monitoring_selectors.episodes_recent(pool=pool),
        "titles": {info.reason: info.title for info in RULES},
        "form": form,
        "can_silence": can_silence,
        "webhook": bool(settings.EBCLOUD_ALERT_WEBHOOK_URL),
    }
    return htmx_render(request, "pools/pool_alerts.html", context, status=400 if form.errors else 200)


def silence_end(request, pool, now):
    try:
        silence = AlertSilence.objects.get(pk=parse_whole_number(request.POST["end"]), pool=pool)
    except (AlertSilence.DoesNotExist, ValueError):
        raise Http404("no such silence on this pool") from None
    if silences.alert_silence_end(user=request.user, silence=silence, now=now):
        messages.success(request, f"{RULES_BY_REASON[silence.rule].title} alerts of {pool.name} are told again.")
    else:
        messages.info(request, "That silence had already ended.")
    return HttpResponseRedirect(reverse("pools:alerts", args=[pool.name]))
