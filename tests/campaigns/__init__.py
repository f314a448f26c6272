"""Long campaigns: property-based (hypothesis), crash, fault and hostile-client runs."""
