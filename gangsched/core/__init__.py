"""The pure, synchronous scheduling core: events in, decisions out."""
