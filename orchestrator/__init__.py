"""The training controller: async (Stellaris) and sync loops, invokers, aggregation, cost."""
