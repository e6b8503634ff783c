"""What a person sees: terminal tables, JSON facts and HTML pages."""
