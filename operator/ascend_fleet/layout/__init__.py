"""The parallel layout planner: how a tensor x pipeline x data layout maps onto Ascend pods and nodes."""

from .planner import ALLOWED_NPUS_PER_POD, Layout, LayoutError, plan, plan_roles, role_spec

__all__ = ["ALLOWED_NPUS_PER_POD", "Layout", "LayoutError", "plan", "plan_roles", "role_spec"]
