"""The control loop: rules over Prometheus windows -> scale and restart decisions.

- :mod:`.queries` (pure): the distinct PromQL of a cycle and reading its answers;
- :mod:`.model` (pure): the values the evaluation and the actions share (object, held rule, cycle, decision);
- :mod:`.actions` (pure): one class per rule action, chosen by its registry;
- :mod:`.evaluate` (pure): :func:`~.evaluate.decide` from plain values (used by the simulator too);
- :mod:`.state` (pure): API objects and pods -> those values, decisions -> ``status.actions``;
- :mod:`.prometheus`: the only Prometheus client, off the event loop with a timeout;
- :mod:`.loop`: one cycle per interval for every object, acting through the reconciler's paths.

The metric catalog is :mod:`ascend_fleet.api.catalog` (the reconciler validates rule metrics with it).
"""
