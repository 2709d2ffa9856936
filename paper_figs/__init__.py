"""Figures regenerated from code: PNG plus the CSV behind each."""
