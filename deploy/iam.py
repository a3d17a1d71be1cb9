"""What the functions' execution role must allow, in one place: the least-privilege policy the
exported template gives the role, the managed policies deploy attaches to a role it creates,
and the check that an existing role (``--role``, or one left from an earlier deploy) allows it.

The check reads the role's trust policy, its attached managed policies and its inline policies
(IAM's documents, not a simulation): an Allow whose action and resource patterns match, and no
Deny that matches. Conditions are not evaluated, and permission boundaries or organisation
SCPs can still deny at run time; the check catches the common mistake, a role made for
something else.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any

from deploy.aws import call
from deploy.errors import DeployError

LAMBDA_TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{
        "Effect": "Allow",
        "Principal": {"Service": "lambda.amazonaws.com"},
        "Action": "sts:AssumeRole",
    }],
}
# Lambda writes each function's logs to /aws/lambda/<name> (the template creates the groups,
# with retention, so the role needs no logs:CreateLogGroup).
LOG_ACTIONS = ("logs:CreateLogStream", "logs:PutLogEvents")
# What Lambda does with the role to attach a function to a VPC (the actions of the managed
# AWSLambdaVPCAccessExecutionRole); ENI actions take no resource narrower than "*".
VPC_ACTIONS = ("ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces",
               "ec2:DescribeSubnets", "ec2:DeleteNetworkInterface",
               "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses")
# What the orchestrator calls on the functions (orchestrator/invokers/lambda_.py).
ORCHESTRATOR_ACTIONS = ("lambda:GetFunction", "lambda:InvokeFunction")


def managed_policy_arns(partition: str, vpc: bool) -> list[str]:
    """The AWS-managed policies deploy attaches to a role it creates."""
    base = f"arn:{partition}:iam::aws:policy/service-role/"
    return [base + "AWSLambdaBasicExecutionRole"] + (
        [base + "AWSLambdaVPCAccessExecutionRole"] if vpc else [])


def log_group_arn(partition: str, region: str, account: str, function: str) -> str:
    return f"arn:{partition}:logs:{region}:{account}:log-group:/aws/lambda/{function}"


def needs(partition: str, region: str, account: str, functions: Iterable[str],
          vpc: bool) -> list[tuple[str, str]]:
    """``(action, resource)`` pairs the execution role must allow."""
    out = [(action, log_group_arn(partition, region, account, fn) + ":*")
           for fn in functions for action in LOG_ACTIONS]
    if vpc:
        out += [(action, "*") for action in VPC_ACTIONS]
    return out


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _matches(statement: dict[str, Any], action: str, resource: str) -> bool:
    actions = [a.lower() for a in _as_list(statement.get("Action", []))]
    if "NotAction" in statement or "NotResource" in statement:
        return False  # too broad to reason about here: treat as not granting
    if not any(fnmatchcase(action.lower(), a) for a in actions):
        return False
    return any(fnmatchcase(resource, r) or r == "*" for r in _as_list(statement.get("Resource", [])))


def _document(doc: Any) -> dict[str, Any]:
    """IAM returns policy documents decoded by boto3, or URL-encoded JSON text."""
    if isinstance(doc, str):
        doc = json.loads(urllib.parse.unquote(doc))
    return dict(doc)


def missing(statements: list[dict[str, Any]], wanted: list[tuple[str, str]]) -> list[str]:
    """The wanted actions that no Allow statement grants (or that a Deny takes away)."""
    out = []
    for action, resource in wanted:
        allowed = any(s.get("Effect") == "Allow" and _matches(s, action, resource)
                      for s in statements)
        denied = any(s.get("Effect") == "Deny" and _matches(s, action, resource)
                     for s in statements)
        if (not allowed or denied) and action not in out:
            out.append(action)
    return out


def role_statements(iam: Any, role_name: str) -> list[dict[str, Any]]:
    """Every statement of the role's attached managed policies and inline policies."""
    statements: list[dict[str, Any]] = []
    attached = call(iam, "list_attached_role_policies", RoleName=role_name)
    for pol in attached.get("AttachedPolicies", []):
        meta = call(iam, "get_policy", PolicyArn=pol["PolicyArn"])["Policy"]
        ver = call(iam, "get_policy_version", PolicyArn=pol["PolicyArn"],
                   VersionId=meta["DefaultVersionId"])["PolicyVersion"]
        statements += _as_list(_document(ver["Document"]).get("Statement", []))
    for name in call(iam, "list_role_policies", RoleName=role_name).get("PolicyNames", []):
        doc = call(iam, "get_role_policy", RoleName=role_name, PolicyName=name)["PolicyDocument"]
        statements += _as_list(_document(doc).get("Statement", []))
    return statements


def check_role(iam: Any, role: dict[str, Any], wanted: list[tuple[str, str]]) -> None:
    """A ``DeployError`` naming what the existing role lacks: Lambda's trust, or actions."""
    name = role["RoleName"]
    trust = _as_list(_document(role.get("AssumeRolePolicyDocument") or {}).get("Statement", []))
    trusted = any(
        s.get("Effect") == "Allow"
        and "lambda.amazonaws.com" in _as_list((s.get("Principal") or {}).get("Service", []))
        and any(fnmatchcase("sts:assumerole", a.lower()) for a in _as_list(s.get("Action", [])))
        for s in trust)
    if not trusted:
        raise DeployError(f"IAM role {name} does not trust lambda.amazonaws.com (its trust policy "
                          "needs sts:AssumeRole for that service): Lambda cannot assume it")
    lacking = missing(role_statements(iam, name), wanted)
    if lacking:
        raise DeployError(f"IAM role {name} does not allow {', '.join(lacking)} (needed by the "
                          "functions; docs/deploy.md#permissions): attach "
                          "AWSLambdaBasicExecutionRole (and AWSLambdaVPCAccessExecutionRole "
                          "in a VPC) or an equivalent policy to it")


# What the identity that runs `stellaris deploy`/`destroy` (and pushes the image) calls, by
# resource. `lambda:ListFunctions`, `ecr:GetAuthorizationToken`, `sts:GetCallerIdentity` and
# the ec2:Describe* calls Lambda makes for a VPC take no resource narrower than "*".
_DEPLOYER: dict[str, tuple[str, ...]] = {
    "function": ("lambda:GetFunction", "lambda:GetFunctionConfiguration", "lambda:CreateFunction",
                 "lambda:UpdateFunctionCode", "lambda:UpdateFunctionConfiguration",
                 "lambda:DeleteFunction", "lambda:ListTags", "lambda:TagResource",
                 "lambda:PutFunctionConcurrency", "lambda:DeleteFunctionConcurrency"),
    "role": ("iam:GetRole", "iam:CreateRole", "iam:TagRole", "iam:ListRoleTags",
             "iam:AttachRolePolicy", "iam:DetachRolePolicy", "iam:ListAttachedRolePolicies",
             "iam:ListRolePolicies", "iam:GetRolePolicy", "iam:DeleteRole", "iam:PassRole"),
    "policy": ("iam:GetPolicy", "iam:GetPolicyVersion"),
    "repository": ("ecr:DescribeRepositories", "ecr:DescribeImages", "ecr:CreateRepository",
                   "ecr:TagResource", "ecr:ListTagsForResource", "ecr:DeleteRepository",
                   "ecr:GetRepositoryPolicy", "ecr:SetRepositoryPolicy",
                   "ecr:BatchCheckLayerAvailability", "ecr:InitiateLayerUpload",
                   "ecr:UploadLayerPart", "ecr:CompleteLayerUpload", "ecr:PutImage",
                   "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"),
    "*": ("sts:GetCallerIdentity", "lambda:ListFunctions", "ecr:GetAuthorizationToken",
          "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVpcs"),
}


def deployer_policy(partition: str, prefix: str, repository: str, region: str = "*",
                    account: str = "*") -> dict[str, Any]:
    """The least-privilege policy for the identity that deploys, destroys and pushes."""
    resources = {
        "function": f"arn:{partition}:lambda:{region}:{account}:function:{prefix}-*",
        "role": f"arn:{partition}:iam::{account}:role/{prefix}-lambda",
        "policy": f"arn:{partition}:iam::aws:policy/service-role/AWSLambda*",
        "repository": f"arn:{partition}:ecr:{region}:{account}:repository/{repository}",
        "*": "*",
    }
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": f"Stellaris{kind.title() if kind != '*' else 'Global'}", "Effect": "Allow",
         "Action": list(actions), "Resource": resources[kind]}
        for kind, actions in _DEPLOYER.items()]}
