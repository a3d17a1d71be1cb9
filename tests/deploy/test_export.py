"""`stellaris deploy --target aws --export DIR`: written offline (no credentials, no network),
lint-clean by cfn-lint, the same functions deploy would create, a role that the existing-role
check accepts, and a stack that moto's CloudFormation creates and deletes."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import boto3
import moto
import pytest
from cfnlint.api import lint
from test_aws_plan import ACCOUNT, REGION, URI, push_image

from deploy import cli as deploy_cli
from deploy.export import template
from deploy.function_plan import ImageCode, create_params
from deploy.functions import function_specs
from deploy.iam import missing, needs


def specs(memory: int = 1769) -> list[Any]:
    return function_specs("stellaris", memory, 3008, 300, {"LOG_LEVEL": "info"},
                          reserved_concurrency={"actor": 64})


@pytest.fixture()
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS credentials or config anywhere, and no socket may connect."""
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
              "AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"--export opened a connection: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_export_is_offline_and_lint_clean(offline: None, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "stack"
    rc = deploy_cli.main(["deploy", "--target", "aws", "--export", str(out), "--image-uri", URI,
                          "--architecture", "arm64", "--reserved", "actor=64",
                          "--learner-memory-mb", "3008", "--region", "cn-north-1"])
    assert rc == 0, capsys.readouterr().err
    assert {p.name for p in out.iterdir()} == {"template.json", "parameters.json",
                                                "deployer-policy.json", "README.md"}
    text = (out / "template.json").read_text()
    problems = lint(text, regions=[REGION])
    assert problems == [], "\n".join(str(p) for p in problems)
    doc = json.loads(text)
    assert doc["Parameters"]["ImageUri"]["Default"] == URI
    assert doc["Parameters"]["Architecture"]["Default"] == "arm64"
    assert "arn:aws:" not in text  # the stack's own partition: ${AWS::Partition}
    params = {p["ParameterKey"]: p["ParameterValue"]
              for p in json.loads((out / "parameters.json").read_text())}
    assert params["ImageUri"] == URI and params["VpcId"] == "<VpcId>"
    policy = json.loads((out / "deployer-policy.json").read_text())
    assert any(s["Resource"] == "arn:aws-cn:lambda:*:*:function:stellaris-*"
               for s in policy["Statement"])  # the partition of --region
    readme = (out / "README.md").read_text()
    assert "aws cloudformation deploy" in readme and "`AWS::ElastiCache::ReplicationGroup` x1" in readme
    # wrong target, or a flag the template does not take: a named error, nothing written
    assert deploy_cli.main(["deploy", "--export", str(tmp_path / "x")]) == 2
    assert "add --target aws" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_template_functions_are_deploys_create_calls() -> None:
    """One description: each function's properties are the CreateFunction deploy would make."""
    doc = template(specs(2048), architecture="x86_64")
    for spec in specs(2048):
        props = doc["Resources"][f"{spec.logical.capitalize()}Function"]["Properties"]
        want = create_params(spec, ImageCode(URI), "role", architecture="x86_64")
        for key in ("FunctionName", "MemorySize", "Timeout", "ImageConfig", "PackageType"):
            assert props[key] == want[key], key
        env = props["Environment"]["Variables"]
        assert env["LOG_LEVEL"] == "info" and "Fn::If" in env["REDIS_URL"]
        assert props.get("ReservedConcurrentExecutions") == spec.reserved_concurrency
    assert doc["Resources"]["ActorFunction"]["Properties"]["MemorySize"] == 2048
    egress = doc["Resources"]["FunctionSecurityGroup"]["Properties"]["SecurityGroupEgress"]
    assert [(e["FromPort"], e["ToPort"]) for e in egress] == [(6379, 6379)]  # Redis only
    # Redis on the orchestrator's instance (RedisUrl set): the functions may reach it there
    ingress = doc["Resources"]["OrchestratorSecurityGroup"]["Properties"]["SecurityGroupIngress"]
    assert ingress["Fn::If"][0] == "CreateCache"
    assert ingress["Fn::If"][2][0]["SourceSecurityGroupId"] == {"Ref": "FunctionSecurityGroup"}
    cache = doc["Resources"]["Cache"]["Properties"]
    assert cache["TransitEncryptionEnabled"] is True and cache["Engine"] == "valkey"
    for spec in specs():
        group = doc["Resources"][f"{spec.logical.capitalize()}LogGroup"]["Properties"]
        assert group["LogGroupName"] == f"/aws/lambda/{spec.name}"
        assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}


def test_template_role_passes_the_existing_role_check() -> None:
    """The template's role allows what deploy demands of an existing role, and no more."""
    doc = template(specs())
    role = doc["Resources"]["FunctionRole"]["Properties"]
    statements = json.loads(json.dumps(role["Policies"][0]["PolicyDocument"]["Statement"])
                            .replace("${AWS::Partition}", "aws")
                            .replace("${AWS::Region}", REGION)
                            .replace("${AWS::AccountId}", ACCOUNT))
    for st in statements:
        if isinstance(st["Resource"], dict):
            st["Resource"] = st["Resource"]["Fn::Sub"]
    wanted = needs("aws", REGION, ACCOUNT, [s.name for s in specs()], vpc=True)
    assert missing(statements, wanted) == []
    granted = {(a, st["Resource"]) for st in statements for a in st["Action"]}
    assert granted == set(wanted)  # least privilege: exactly the needs
    assert "logs:CreateLogGroup" not in json.dumps(statements)  # the template creates them


def test_moto_creates_and_deletes_the_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's CloudFormation has no ElastiCache resources, so the stack is created with
    ``RedisUrl`` set (the cache, its subnet group and security group are conditioned out);
    everything else is created in moto and checked."""
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": REGION, "MOTO_LAMBDA_STUB_ECR": "false"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with moto.mock_aws():
        c = {svc: boto3.client(svc, region_name=REGION)
             for svc in ("ec2", "ecr", "cloudformation", "lambda", "iam", "logs")}
        push_image(c["ecr"])
        vpc = c["ec2"].create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
        subnets = [c["ec2"].create_subnet(VpcId=vpc, CidrBlock=f"10.9.{i}.0/24",
                                          AvailabilityZone=f"{REGION}{az}")["Subnet"]["SubnetId"]
                   for i, az in enumerate("ab")]
        redis = "redis://10.9.0.10:6379/0"
        cf = c["cloudformation"]
        cf.create_stack(StackName="stellaris", TemplateBody=json.dumps(template(specs())),
                        Capabilities=["CAPABILITY_IAM"], Parameters=[
                            {"ParameterKey": "ImageUri", "ParameterValue": URI},
                            {"ParameterKey": "VpcId", "ParameterValue": vpc},
                            {"ParameterKey": "SubnetIds", "ParameterValue": ",".join(subnets)},
                            {"ParameterKey": "RedisUrl", "ParameterValue": redis}])
        stack = cf.describe_stacks(StackName="stellaris")["Stacks"][0]
        assert stack["StackStatus"] == "CREATE_COMPLETE", stack.get("StackStatusReason")
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
        assert outputs["RedisUrl"] == redis
        assert outputs["ActorFunctionName"] == "stellaris-actor"
        created = {r["LogicalResourceId"] for r in
                   cf.list_stack_resources(StackName="stellaris")["StackResourceSummaries"]}
        assert "Cache" not in created and {"FunctionRole", "ActorFunction",
                                           "OrchestratorPolicy"} <= created
        fn = c["lambda"].get_function(FunctionName="stellaris-learner")
        cfg = fn["Configuration"]
        # moto's CloudFormation passes Code, memory, timeout, VPC and environment on to Lambda
        # (not PackageType, ImageConfig, Architectures or Tags: cfn-lint checks those above)
        assert (cfg["MemorySize"], cfg["Timeout"]) == (3008, 300)
        assert fn["Code"]["ImageUri"] == URI
        assert cfg["Environment"]["Variables"]["REDIS_URL"] == redis
        assert sorted(cfg["VpcConfig"]["SubnetIds"]) == sorted(subnets)
        groups = {g["logGroupName"]: g.get("retentionInDays") for g in
                  c["logs"].describe_log_groups(logGroupNamePrefix="/aws/lambda/")["logGroups"]}
        assert groups["/aws/lambda/stellaris-actor"] == 14
        sgs = c["ec2"].describe_security_groups(GroupIds=[outputs["FunctionSecurityGroupId"]])
        assert sgs["SecurityGroups"][0]["VpcId"] == vpc  # (moto drops its egress rules)
        cf.delete_stack(StackName="stellaris")
        assert c["lambda"].list_functions()["Functions"] == []
