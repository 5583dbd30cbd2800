"""`manage.py fragmentation`: print the cluster's fragmentation report; `--record` stores the
trend point of every pool and of the cluster now (what the weekly schedule does)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from pools.services.fragmentation import fragmentation_for, fragmentation_record


class Command(BaseCommand):
    help = "Fragmentation report of the whole cluster; --record stores a trend point per pool."

    def add_arguments(self, parser):
        parser.add_argument("--record", action="store_true", help="Store the trend points now")

    def handle(self, *args, record: bool = False, **options):
        if record:
            samples = fragmentation_record()
            self.stdout.write(f"recorded {len(samples)} sample(s)")
        report = fragmentation_for(pools=None, scope="cluster", with_plan=True)
        r, plan = report.report, report.plan
        self.stdout.write(
            f"{r.allocated_gpu_milli / 1000:g}/{r.total_gpu_milli / 1000:g} GPUs allocated, {r.unallocated_pct:.1f}% unallocated; "
            f"nodes allocated < 50%: {', '.join(r.underused_nodes) or 'none'}; "
            f"repack frees {', '.join(plan.freed_nodes) or 'no node'} ({plan.gpu_hours_saved_per_week} GPU-hours a week) "
            f"by moving {len(plan.moves)} pod(s); running no pods already: {', '.join(plan.empty_nodes) or 'none'}; "
            f"packing GPU shares frees {plan.share_gpus_freed} whole GPU(s) and starts {len(plan.share_placements)} waiting pod(s) "
            f"by moving {len(plan.share_moves)} pod(s)"
        )
