"""``stellaris deploy --target aws --export DIR``: everything a run needs on AWS as a
CloudFormation template, written offline (no credentials, no network) to review and deploy
with ``aws cloudformation deploy``.

The functions are the same ``CreateFunction`` calls deploy would make
(``deploy.function_plan.create_params`` of the same specs), with the account-specific values
(image, role, subnets, Redis URL) replaced by parameters and references; the role's policy is
``deploy.iam.needs`` for those functions. Beside them: security groups in an existing VPC,
ElastiCache (Valkey, TLS in transit) unless ``RedisUrl`` names a Redis, log groups with
retention, and a managed policy for the orchestrator. DIR gets ``template.json``,
``parameters.json``, ``deployer-policy.json`` and a ``README.md``
(``deploy/export_readme.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deploy.aws import MANAGED_TAG
from deploy.export_readme import readme
from deploy.function_plan import ImageCode, create_params
from deploy.iam import LAMBDA_TRUST_POLICY, ORCHESTRATOR_ACTIONS, deployer_policy, needs

# Placeholders in the CreateFunction parameters, replaced by CloudFormation expressions.
_IMAGE, _ROLE, _SUBNETS, _GROUPS, _ARCH, _REDIS = (
    "{{image}}", "{{role}}", "{{subnets}}", "{{groups}}", "{{arch}}", "{{redis}}")
_CACHE_URL = "rediss://${Cache.PrimaryEndPoint.Address}:${Cache.PrimaryEndPoint.Port}/0"
# AWS::Lambda::Function properties that CreateFunction's parameters map to one for one.
_FUNCTION_PROPS = ("FunctionName", "Role", "MemorySize", "Timeout", "Environment", "ImageConfig",
                   "VpcConfig", "PackageType", "Code", "Architectures")


def _logical(spec: Any) -> str:
    return spec.logical.capitalize()


def _tags(extra: dict[str, str] | None = None) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in {MANAGED_TAG[0]: MANAGED_TAG[1],
                                                 **(extra or {})}.items()]


def _substitute(value: Any, mapping: dict[str, Any]) -> Any:
    """Placeholders (a string, or a list of one) -> their CloudFormation expressions."""
    if isinstance(value, str) and value in mapping:
        return mapping[value]
    if isinstance(value, list):
        if value == [_SUBNETS]:  # a List<Subnet::Id> parameter is the whole list
            return mapping[_SUBNETS]
        return [_substitute(v, mapping) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, mapping) for k, v in value.items()}
    return value


def _function(spec: Any) -> dict[str, Any]:
    env = dict(spec.environment)
    env["REDIS_URL"] = _REDIS
    spec = type(spec)(**{**spec.__dict__, "environment": env})
    params = create_params(spec, ImageCode(_IMAGE), _ROLE,
                           vpc={"SubnetIds": [_SUBNETS], "SecurityGroupIds": [_GROUPS]},
                           architecture=_ARCH)
    props = _substitute({k: params[k] for k in _FUNCTION_PROPS if k in params}, {
        _IMAGE: {"Ref": "ImageUri"},
        _ROLE: {"Fn::GetAtt": ["FunctionRole", "Arn"]},
        _SUBNETS: {"Ref": "SubnetIds"},
        _GROUPS: {"Ref": "FunctionSecurityGroup"},
        _ARCH: {"Ref": "Architecture"},
        _REDIS: {"Fn::If": ["CreateCache", {"Fn::Sub": _CACHE_URL}, {"Ref": "RedisUrl"}]},
    })
    if spec.reserved_concurrency is not None:
        props["ReservedConcurrentExecutions"] = spec.reserved_concurrency
    props["Tags"] = _tags()
    return {"Type": "AWS::Lambda::Function", "DependsOn": f"{_logical(spec)}LogGroup",
            "Properties": props}


def _parameters(image_uri: str | None, architecture: str | None, redis_url: str | None,
                subnet_ids: list[str] | None) -> dict[str, Any]:
    image: dict[str, Any] = {"Type": "String", "AllowedPattern": r"^\d{12}\.dkr\.ecr\..+$",
                             "Description": "ECR image of deploy/Dockerfile.function, built for "
                                            "Architecture (Lambda pulls from its own region)"}
    if image_uri:
        image["Default"] = image_uri
    subnets: dict[str, Any] = {"Type": "List<AWS::EC2::Subnet::Id>",
                               "Description": "Subnets (two AZs or more) for the functions and "
                                              "the cache, in VpcId"}
    if subnet_ids:
        subnets["Default"] = ",".join(subnet_ids)
    return {
        "ImageUri": image,
        "Architecture": {"Type": "String", "Default": architecture or "x86_64",
                         "AllowedValues": ["x86_64", "arm64"],
                         "Description": "The image's architecture (arm64 is ~20% cheaper per GB-s)"},
        "VpcId": {"Type": "AWS::EC2::VPC::Id",
                  "Description": "The VPC of the functions, the cache and the orchestrator"},
        "SubnetIds": subnets,
        "RedisUrl": {"Type": "String", "Default": redis_url or "",
                     "Description": "A Redis the functions reach (e.g. on the orchestrator's "
                                    "instance); empty: create ElastiCache (Valkey, TLS)"},
        "CacheNodeType": {"Type": "String", "Default": "cache.t4g.micro",
                          "Description": "ElastiCache node type (when RedisUrl is empty)"},
        "LogRetentionDays": {"Type": "Number", "Default": 14,
                             "AllowedValues": [1, 3, 5, 7, 14, 30, 60, 90, 180, 365],
                             "Description": "How long the functions' logs are kept"},
    }


def _network() -> dict[str, Any]:
    """Functions may reach Redis only; Redis accepts the functions and the orchestrator."""
    redis_port = {"IpProtocol": "tcp", "FromPort": 6379, "ToPort": 6379}
    return {
        "FunctionSecurityGroup": {"Type": "AWS::EC2::SecurityGroup", "Properties": {
            "GroupDescription": "Stellaris functions: out to Redis only",
            "VpcId": {"Ref": "VpcId"},
            # no NAT and no other egress: the functions talk to Redis and nothing else
            "SecurityGroupEgress": [{**redis_port, "CidrIp": "0.0.0.0/0",
                                     "Description": "Redis"}],
            "Tags": _tags()}},
        "OrchestratorSecurityGroup": {"Type": "AWS::EC2::SecurityGroup", "Properties": {
            "GroupDescription": "Stellaris orchestrator (attach to the instance running "
                                "stellaris train): reaches Redis and the Lambda API",
            "VpcId": {"Ref": "VpcId"},
            # without ElastiCache, Redis runs on the orchestrator's instance: let functions in
            "SecurityGroupIngress": {"Fn::If": ["CreateCache", {"Ref": "AWS::NoValue"}, [
                {**redis_port, "SourceSecurityGroupId": {"Ref": "FunctionSecurityGroup"},
                 "Description": "functions to the Redis on this instance"}]]},
            "Tags": _tags()}},
        "CacheSecurityGroup": {"Type": "AWS::EC2::SecurityGroup", "Condition": "CreateCache",
                               "Properties": {
            "GroupDescription": "Stellaris Redis: from the functions and the orchestrator",
            "VpcId": {"Ref": "VpcId"},
            "SecurityGroupIngress": [
                {**redis_port, "SourceSecurityGroupId": {"Ref": "FunctionSecurityGroup"},
                 "Description": "functions"},
                {**redis_port, "SourceSecurityGroupId": {"Ref": "OrchestratorSecurityGroup"},
                 "Description": "orchestrator"}],
            "Tags": _tags()}},
        "CacheSubnets": {"Type": "AWS::ElastiCache::SubnetGroup", "Condition": "CreateCache",
                         "Properties": {"Description": "Stellaris Redis subnets",
                                        "SubnetIds": {"Ref": "SubnetIds"}}},
        "Cache": {"Type": "AWS::ElastiCache::ReplicationGroup", "Condition": "CreateCache",
                  "Properties": {
            "ReplicationGroupDescription": "Stellaris store (one node, no persistence: the "
                                           "run folder's checkpoints are the durable state)",
            "Engine": "valkey", "EngineVersion": "8.0",
            "CacheNodeType": {"Ref": "CacheNodeType"}, "NumCacheClusters": 1,
            "TransitEncryptionEnabled": True, "AtRestEncryptionEnabled": True,
            "CacheSubnetGroupName": {"Ref": "CacheSubnets"},
            "SecurityGroupIds": [{"Ref": "CacheSecurityGroup"}],
            "Tags": _tags()}},
    }


def template(specs: list[Any], *, image_uri: str | None = None, architecture: str | None = None,
             redis_url: str | None = None, subnet_ids: list[str] | None = None) -> dict[str, Any]:
    """The CloudFormation template of a run's AWS resources, for these function specs."""
    resources: dict[str, Any] = _network()
    wanted = needs("${AWS::Partition}", "${AWS::Region}", "${AWS::AccountId}",
                   [s.name for s in specs], vpc=True)
    statements = [{"Effect": "Allow", "Action": sorted({a for a, r in wanted if r == res}),
                   "Resource": res if res == "*" else {"Fn::Sub": res}}
                  for res in dict.fromkeys(r for _, r in wanted)]
    resources["FunctionRole"] = {"Type": "AWS::IAM::Role", "Properties": {
        "Description": "Stellaris functions: their own log streams and VPC network interfaces",
        "AssumeRolePolicyDocument": LAMBDA_TRUST_POLICY,
        "Policies": [{"PolicyName": "stellaris-functions",
                      "PolicyDocument": {"Version": "2012-10-17", "Statement": statements}}],
        "Tags": _tags()}}
    outputs: dict[str, Any] = {}
    for spec in specs:
        name = _logical(spec)
        resources[f"{name}LogGroup"] = {
            "Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Delete",
            "UpdateReplacePolicy": "Delete",
            "Properties": {"LogGroupName": f"/aws/lambda/{spec.name}",
                           "RetentionInDays": {"Ref": "LogRetentionDays"}}}
        resources[f"{name}Function"] = _function(spec)
        outputs[f"{name}FunctionName"] = {"Value": {"Ref": f"{name}Function"}}
        outputs[f"{name}FunctionArn"] = {"Value": {"Fn::GetAtt": [f"{name}Function", "Arn"]}}
    resources["OrchestratorPolicy"] = {"Type": "AWS::IAM::ManagedPolicy", "Properties": {
        "Description": "Attach to the orchestrator's role or user: invoke the Stellaris functions",
        "PolicyDocument": {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": list(ORCHESTRATOR_ACTIONS),
            "Resource": [{"Fn::GetAtt": [f"{_logical(s)}Function", "Arn"]} for s in specs]}]}}}
    redis = {"Fn::If": ["CreateCache", {"Fn::Sub": _CACHE_URL}, {"Ref": "RedisUrl"}]}
    prefix = specs[0].name.rsplit("-", 1)[0]
    outputs.update({
        "RedisUrl": {"Description": "The Redis URL the functions use (pass it to stellaris train)",
                     "Value": redis},
        "FunctionSecurityGroupId": {"Value": {"Ref": "FunctionSecurityGroup"}},
        "OrchestratorSecurityGroupId": {"Value": {"Ref": "OrchestratorSecurityGroup"}},
        "OrchestratorPolicyArn": {"Value": {"Ref": "OrchestratorPolicy"}},
        "TrainCommand": {"Description": "Run on an instance in VpcId with OrchestratorSecurityGroupId",
                         "Value": {"Fn::Sub": [
                             "stellaris train --backend lambda --region ${AWS::Region} "
                             f"--function-prefix {prefix} --redis-url ${{Url}}",
                             {"Url": redis}]}},
    })
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": f"Stellaris on AWS Lambda: functions {', '.join(s.name for s in specs)}, "
                       "their role and logs, security groups, Redis "
                       "(written by stellaris deploy --export)",
        "Parameters": _parameters(image_uri, architecture, redis_url, subnet_ids),
        "Conditions": {"CreateCache": {"Fn::Equals": [{"Ref": "RedisUrl"}, ""]}},
        "Resources": resources,
        "Outputs": outputs,
    }


def write_export(out: Path, specs: list[Any], *, image_uri: str | None = None,
                 architecture: str | None = None, redis_url: str | None = None,
                 subnet_ids: list[str] | None = None, partition: str = "aws") -> list[Path]:
    """Write the template, its parameters, the deployer's policy and a README into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    doc = template(specs, image_uri=image_uri, architecture=architecture, redis_url=redis_url,
                   subnet_ids=subnet_ids)
    prefix = specs[0].name.rsplit("-", 1)[0]
    repository = image_uri.split("/", 1)[1].split(":")[0].split("@")[0] if image_uri else "stellaris"
    params = [{"ParameterKey": k, "ParameterValue": str(p.get("Default", f"<{k}>"))}
              for k, p in doc["Parameters"].items()]
    files = {
        "template.json": json.dumps(doc, indent=2) + "\n",
        "parameters.json": json.dumps(params, indent=2) + "\n",
        "deployer-policy.json": json.dumps(deployer_policy(partition, prefix, repository),
                                           indent=2) + "\n",
        "README.md": readme(doc, prefix),
    }
    written = []
    for name, text in files.items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written
