"""jobq in the frameworks teams use it from: ``jobq.contrib.django``."""
