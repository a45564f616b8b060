"""robopt."""
