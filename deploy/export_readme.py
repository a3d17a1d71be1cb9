"""The README that ``stellaris deploy --export DIR`` writes beside the template: what it
creates, its parameters, and the commands from an empty account to a run and back."""

from __future__ import annotations

from typing import Any


def readme(doc: dict[str, Any], prefix: str) -> str:
    """Markdown for the exported ``doc`` (its parameters and outputs listed from it)."""
    params = "\n".join(
        f"| `{k}` | {p['Type']} | {('`' + str(p['Default']) + '`') if 'Default' in p else 'required'}"
        f" | {p.get('Description', '')} |"
        for k, p in doc["Parameters"].items())
    kinds: dict[str, int] = {}
    for res in doc["Resources"].values():
        kinds[res["Type"]] = kinds.get(res["Type"], 0) + 1
    resources = "\n".join(f"- `{t}` x{n}" for t, n in sorted(kinds.items()))
    outputs = ", ".join(f"`{k}`" for k in doc["Outputs"])
    return f"""# Stellaris on AWS: the exported template

Written by `stellaris deploy --target aws --export` from the same function specs `stellaris
deploy` uses. Review it, then deploy it with CloudFormation. Walk-through: docs/deploy.md in
the Stellaris repository.

| file | what |
| --- | --- |
| `template.json` | the CloudFormation template |
| `parameters.json` | its parameters, defaults filled in (`<Name>`: yours to fill) |
| `deployer-policy.json` | least-privilege IAM policy for whoever runs `stellaris deploy`/`destroy` and pushes the image (the CloudFormation route needs only its ECR part, for the push) |

## Resources

{resources}

Functions (`{prefix}-actor`, `{prefix}-learner`, `{prefix}-evaluator`) run the image in the VPC;
their role may write only their own log groups (kept `LogRetentionDays`) and manage their
network interfaces. Redis is ElastiCache (Valkey 8.0, TLS in transit, encrypted at rest, no
AUTH: only the two security groups reach it) unless `RedisUrl` names one. ElastiCache takes
10-15 minutes to create.

## Parameters

| name | type | default | meaning |
| --- | --- | --- | --- |
{params}

## Deploy, train, tear down

```bash
aws cloudformation deploy --stack-name {prefix} --template-file template.json \\
  --capabilities CAPABILITY_IAM \\
  --parameter-overrides ImageUri=$URI VpcId=$VPC SubnetIds=$SUBNETS
aws cloudformation describe-stacks --stack-name {prefix} --query 'Stacks[0].Outputs'
# on an instance in the VPC with OrchestratorSecurityGroupId and OrchestratorPolicyArn:
stellaris train --backend lambda --region $REGION --function-prefix {prefix} \\
  --redis-url <RedisUrl output> --env Hopper-v5 --minutes 30
aws cloudformation delete-stack --stack-name {prefix}
aws cloudformation wait stack-delete-complete --stack-name {prefix}
```

Outputs: {outputs}.
"""
