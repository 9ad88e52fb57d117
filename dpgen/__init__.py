"""dpgen."""
