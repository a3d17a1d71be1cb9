"""Invokers: inline (threads), local runtime and AWS Lambda (boto3), Ray."""
