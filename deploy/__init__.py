"""Packaging and deployment of the Stellaris functions (local runtime, AWS Lambda)."""
