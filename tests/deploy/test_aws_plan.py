"""The AWS deploy path against moto: plan contents, create, update, idempotence, destroy, and
one-line errors for missing permissions and a missing image."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import moto  # noqa: F401 - a dev dependency: an ImportError fails loudly, never a skip
import pytest
from botocore.stub import Stubber

from deploy import cli as deploy_cli
from deploy.aws import MANAGED_TAG
from deploy.aws_plan import AwsSettings, parse_image_uri, plan_aws
from deploy.destroy import plan_destroy
from deploy.errors import DeployError, PermissionDenied
from deploy.execute import execute, wait_settled
from deploy.functions import function_specs
from deploy.iam import LAMBDA_TRUST_POLICY, deployer_policy, needs

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's account
REPO = "stellaris"
URI = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/{REPO}:1"
REDIS = "redis://cache.example.internal:6379/0"


@pytest.fixture()
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION,
        # AWS-managed policies (AWSLambdaBasicExecutionRole) exist, and Lambda resolves the
        # image in moto's ECR (real digests, ImageNotFound) instead of stubbing it.
        "MOTO_IAM_LOAD_MANAGED_POLICIES": "true", "MOTO_LAMBDA_STUB_ECR": "false",
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with moto.mock_aws():
        yield {svc: boto3.client(svc, region_name=REGION) for svc in ("sts", "iam", "ecr", "lambda")}


def push_image(ecr: Any, tag: str = "1", salt: str = "a") -> str:
    """Put an image manifest in moto's ECR (what `docker push` does); returns its digest."""
    with contextlib.suppress(ecr.exceptions.RepositoryAlreadyExistsException):
        ecr.create_repository(repositoryName=REPO)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 7023,
                   "digest": "sha256:" + salt * 64},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": 1024, "digest": "sha256:" + salt * 64}],
    })
    out = ecr.put_image(repositoryName=REPO, imageManifest=manifest, imageTag=tag)
    return out["image"]["imageId"]["imageDigest"]


BASIC = "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
VPC_POLICY = "arn:aws:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole"


def lambda_role(iam: Any, name: str, managed: list[str], trust: Any = LAMBDA_TRUST_POLICY,
                inline: dict[str, Any] | None = None) -> str:
    """An existing role made by hand: ``trust`` policy, managed and inline policies."""
    arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    for policy in managed:
        iam.attach_role_policy(RoleName=name, PolicyArn=policy)
    if inline:
        iam.put_role_policy(RoleName=name, PolicyName="own", PolicyDocument=json.dumps(inline))
    return str(arn)


def settings(memory: int = 1769, uri: str = URI, **kw: Any) -> AwsSettings:
    specs = function_specs("stellaris", memory, 3008, 300, {"REDIS_URL": REDIS},
                           reserved_concurrency={"actor": 10})
    return AwsSettings(uri, specs, **kw)


def test_parse_image_uri() -> None:
    parts = parse_image_uri(URI)
    assert (parts["account"], parts["region"], parts["repo"], parts["tag"]) == (ACCOUNT, REGION, REPO, "1")
    assert parse_image_uri(URI.rsplit(":", 1)[0])["tag"] == "latest"
    with pytest.raises(DeployError, match="not an ECR image URI"):
        parse_image_uri("docker.io/library/python:3.11")


def test_plan_contents_then_create_update_idempotent_destroy(aws: dict[str, Any]) -> None:
    push_image(aws["ecr"])
    plan = plan_aws(aws, settings(), REGION)
    assert not plan.problems
    kinds = [(s.action, s.kind, s.target) for s in plan.steps]
    assert kinds == [
        ("create", "iam-role", "stellaris-lambda"),
        ("noop", "ecr-repository", REPO),
        ("create", "function", "stellaris-actor"),
        ("put", "concurrency", "stellaris-actor"),
        ("create", "function", "stellaris-learner"),
        ("create", "function", "stellaris-evaluator"),
    ]
    create = {s.target: s.params for s in plan.steps if s.kind == "function"}
    actor, learner = create["stellaris-actor"], create["stellaris-learner"]
    assert actor["PackageType"] == "Image" and actor["Code"] == {"ImageUri": URI}
    assert actor["ImageConfig"] == {"Command": ["functions.actor.handler"]}
    assert learner["ImageConfig"] == {"Command": ["functions.learner.handler"]}
    assert actor["Environment"] == {"Variables": {"REDIS_URL": REDIS}}
    assert (actor["MemorySize"], learner["MemorySize"], actor["Timeout"]) == (1769, 3008, 300)
    assert actor["Role"] == f"arn:aws:iam::{ACCOUNT}:role/stellaris-lambda"
    assert actor["Tags"] == {MANAGED_TAG[0]: MANAGED_TAG[1]}
    doc = json.loads(plan.dumps())
    assert doc["changes"] == 5 and doc["steps"][3]["params"]["ReservedConcurrentExecutions"] == 10
    assert "+ create  function         stellaris-actor" in plan.render()

    # -- create
    done = execute(plan, aws)
    assert len(done) == 5
    lam = aws["lambda"]
    fn = lam.get_function(FunctionName="stellaris-actor")
    assert fn["Configuration"]["PackageType"] == "Image"
    assert fn["Code"]["ImageUri"] == URI
    assert fn["Tags"][MANAGED_TAG[0]] == MANAGED_TAG[1]
    assert fn["Concurrency"]["ReservedConcurrentExecutions"] == 10
    policies = aws["iam"].list_attached_role_policies(RoleName="stellaris-lambda")["AttachedPolicies"]
    assert [p["PolicyName"] for p in policies] == ["AWSLambdaBasicExecutionRole"]

    # -- idempotent: the second plan is all no-ops and executing it makes no call
    again = plan_aws(aws, settings(), REGION)
    assert again.is_noop and not again.problems, again.render()
    assert execute(again, aws) == []

    # -- update: memory, reserved concurrency removed, and a new image under the same tag
    push_image(aws["ecr"], salt="b")
    s2 = settings(memory=2048)
    s2.specs = [type(sp)(**{**sp.__dict__, "reserved_concurrency": None}) for sp in s2.specs]
    upd = plan_aws(aws, s2, REGION)
    changed = {(s.action, s.kind, s.target) for s in upd.changes}
    assert ("update", "function-config", "stellaris-actor") in changed
    assert ("update", "function-config", "stellaris-evaluator") in changed
    assert ("update", "function-config", "stellaris-learner") not in changed
    assert ("delete", "concurrency", "stellaris-actor") in changed
    assert {("update", "function-code", f"stellaris-{f}") for f in ("actor", "learner", "evaluator")} <= changed
    execute(upd, aws)
    cfg = lam.get_function(FunctionName="stellaris-actor")
    assert cfg["Configuration"]["MemorySize"] == 2048 and "Concurrency" not in cfg
    assert plan_aws(aws, s2, REGION).is_noop

    # -- destroy: only what deploy created (an unmanaged function of the prefix is kept)
    lam.create_function(FunctionName="stellaris-other", Role=cfg["Configuration"]["Role"],
                        PackageType="Image", Code={"ImageUri": URI})
    gone = plan_destroy(aws, "stellaris", ["actor", "learner", "evaluator", "other"], "aws",
                        region=REGION, role_name="stellaris-lambda", repository=REPO)
    actions = {(s.action, s.kind, s.target) for s in gone.steps}
    assert ("noop", "function", "stellaris-other") in actions
    assert ("delete", "iam-role", "stellaris-lambda") in actions
    assert ("noop", "ecr-repository", REPO) in actions  # pushed by the user: not ours
    execute(gone, aws)
    names = {f["FunctionName"] for f in lam.list_functions()["Functions"]}
    assert names == {"stellaris-other"}
    with pytest.raises(aws["iam"].exceptions.NoSuchEntityException):
        aws["iam"].get_role(RoleName="stellaris-lambda")


def test_cli_dry_run_json_and_exec(aws: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    push_image(aws["ecr"])
    base = ["deploy", "--target", "aws", "--region", REGION, "--image-uri", URI, "--redis-url", REDIS]
    assert deploy_cli.main([*base, "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dry_run"] and doc["applied"] is None and doc["changes"] == 4
    assert aws["lambda"].list_functions()["Functions"] == []  # dry run changed nothing
    assert deploy_cli.main(base) == 0
    out = capsys.readouterr().out
    assert "applied 4 changes" in out
    assert deploy_cli.main(base) == 0
    out = capsys.readouterr().out
    assert "0 changes" in out and "no changes" in out
    assert deploy_cli.main(["destroy", "--target", "aws", "--region", REGION, "--all",
                            "--image-uri", URI]) == 0
    assert "applied 4 changes" in capsys.readouterr().out  # 3 functions + the role
    assert aws["lambda"].list_functions()["Functions"] == []


def test_existing_role_and_repository_only(aws: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    # --repository-only: the first step, before `docker push`
    assert deploy_cli.main(["deploy", "--target", "aws", "--image-uri", URI, "--repository-only"]) == 0
    assert "create  ecr-repository" in capsys.readouterr().out
    tags = aws["ecr"].list_tags_for_resource(
        resourceArn=aws["ecr"].describe_repositories()["repositories"][0]["repositoryArn"])["tags"]
    assert {"Key": MANAGED_TAG[0], "Value": MANAGED_TAG[1]} in tags
    push_image(aws["ecr"])
    role = lambda_role(aws["iam"], "mine", [BASIC])
    plan = plan_aws(aws, settings(role_arn=role), REGION)
    assert plan.steps[0].action == "noop" and plan.steps[0].kind == "iam-role"
    execute(plan, aws)
    assert aws["lambda"].get_function(FunctionName="stellaris-learner")["Configuration"]["Role"] == role
    missing = f"arn:aws:iam::{ACCOUNT}:role/nope"
    assert deploy_cli.main(["deploy", "--target", "aws", "--image-uri", URI, "--role", missing]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_missing_image(aws: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    # no repository at all: the plan would create it, but the functions have no image
    rc = deploy_cli.main(["deploy", "--target", "aws", "--image-uri", URI])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 5 and len(err) == 1
    assert err[0].startswith(f"error: image {URI} not found in ECR")
    # repository exists, tag does not
    push_image(aws["ecr"], tag="other")
    rc = deploy_cli.main(["deploy", "--target", "aws", "--image-uri", URI, "--dry-run"])
    cap = capsys.readouterr()
    assert rc == 5 and "not found in ECR" in cap.err and "! image" in cap.out
    assert aws["lambda"].list_functions()["Functions"] == []


def test_missing_permissions(aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    push_image(aws["ecr"])
    stubber = Stubber(aws["iam"])
    stubber.add_client_error(
        "get_role", service_error_code="AccessDenied", http_status_code=403,
        service_message="User: arn:aws:iam::123456789012:user/dev is not authorized to perform: "
                        "iam:GetRole on resource: role stellaris-lambda",
    )
    with stubber, pytest.raises(PermissionDenied, match=r"permission denied: iam:GetRole \(AccessDenied\)"):
        plan_aws(aws, settings(), REGION)

    # through the CLI: one line on stderr, exit code 3
    stubber = Stubber(aws["iam"])
    stubber.add_client_error("get_role", service_error_code="AccessDenied", http_status_code=403,
                             service_message="not authorized to perform: iam:GetRole")
    monkeypatch.setattr(deploy_cli, "make_clients", lambda *a: aws)
    with stubber:
        rc = deploy_cli.main(["deploy", "--target", "aws", "--image-uri", URI])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3 and err == ["error: permission denied: iam:GetRole (AccessDenied): "
                               "not authorized to perform: iam:GetRole"]


def test_unmanaged_function_is_not_touched(aws: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    push_image(aws["ecr"])
    role = lambda_role(aws["iam"], "r", [BASIC])
    aws["lambda"].create_function(FunctionName="stellaris-actor", Role=role, PackageType="Image",
                                  Code={"ImageUri": URI})
    rc = deploy_cli.main(["deploy", "--target", "aws", "--image-uri", URI, "--role", role])
    assert rc == 2 and "not managed by stellaris" in capsys.readouterr().err


def test_existing_role_must_trust_lambda_and_allow_what_functions_do(
        aws: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    push_image(aws["ecr"])
    iam = aws["iam"]
    base = ["deploy", "--target", "aws", "--image-uri", URI, "--dry-run"]
    bare = lambda_role(iam, "bare", [])
    assert deploy_cli.main([*base, "--role", bare]) == 2
    err = capsys.readouterr().err
    assert "IAM role bare does not allow logs:CreateLogStream, logs:PutLogEvents" in err
    ec2_trust = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
    other = lambda_role(iam, "for-ec2", [BASIC], trust=ec2_trust)
    assert deploy_cli.main([*base, "--role", other]) == 2
    assert "does not trust lambda.amazonaws.com" in capsys.readouterr().err
    # functions in a VPC: the basic policy lacks the ENI actions
    vpc = ["--subnet-ids", "subnet-1", "--security-group-ids", "sg-1"]
    basic = lambda_role(iam, "basic", [BASIC])
    assert deploy_cli.main([*base, "--role", basic, *vpc]) == 2
    assert "does not allow ec2:CreateNetworkInterface" in capsys.readouterr().err
    # a Deny wins over the managed Allow
    deny = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Action": "logs:PutLogEvents", "Resource": "*"}]}
    denied = lambda_role(iam, "denied", [BASIC], inline=deny)
    assert deploy_cli.main([*base, "--role", denied]) == 2
    assert "does not allow logs:PutLogEvents" in capsys.readouterr().err
    # least privilege, inline: exactly the functions' log groups (and the ENI actions)
    wanted = needs("aws", REGION, ACCOUNT, [s.name for s in settings().specs], vpc=True)
    exact = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": [a], "Resource": r} for a, r in wanted]}
    narrow = lambda_role(iam, "narrow", [], inline=exact)
    assert deploy_cli.main([*base, "--role", narrow, *vpc]) == 0, capsys.readouterr().err
    # ... and a role for other functions' log groups is not enough
    elsewhere = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
        "Resource": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/other-*"}]}
    assert deploy_cli.main([*base, "--role", lambda_role(iam, "else", [], inline=elsewhere)]) == 2
    assert "does not allow logs:CreateLogStream" in capsys.readouterr().err


@pytest.mark.parametrize("partition", ["aws-cn", "aws-us-gov"])
def test_partition_comes_from_the_caller_identity(aws: dict[str, Any], partition: str) -> None:
    push_image(aws["ecr"])
    stub = Stubber(aws["sts"])
    stub.add_response("get_caller_identity", {
        "UserId": "AIDAEXAMPLE", "Account": ACCOUNT,
        "Arn": f"arn:{partition}:iam::{ACCOUNT}:user/dev"})
    with stub:
        plan = plan_aws(aws, settings(vpc={"SubnetIds": ["s"], "SecurityGroupIds": ["g"]}), REGION)
    role = plan.steps[0]
    assert role.kind == "iam-role" and role.action == "create"
    assert role.params["AttachPolicies"] == [
        f"arn:{partition}:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        f"arn:{partition}:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole"]
    fn = next(s for s in plan.steps if s.kind == "function")
    assert fn.params["Role"] == f"arn:{partition}:iam::{ACCOUNT}:role/stellaris-lambda"
    assert "arn:aws:" not in plan.dumps()


def test_inactive_function_is_updated_not_waited_on(aws: dict[str, Any]) -> None:
    from moto.awslambda.models import lambda_backends

    push_image(aws["ecr"])
    execute(plan_aws(aws, settings(), REGION), aws)
    backend = lambda_backends[ACCOUNT][REGION]
    backend.get_function("stellaris-learner").state = "Inactive"  # idle for weeks, on AWS
    idle = plan_aws(aws, settings(), REGION)
    assert [s.reason for s in idle.steps if s.target == "stellaris-learner"] == [
        "up to date (Inactive)"]
    upd = plan_aws(aws, settings(memory=2048), REGION)  # the actor and evaluator change
    backend.get_function("stellaris-actor").state = "Inactive"
    t0 = time.monotonic()
    execute(upd, aws)
    assert time.monotonic() - t0 < 10  # not the waiter's timeout
    cfg = aws["lambda"].get_function_configuration(FunctionName="stellaris-actor")
    assert cfg["MemorySize"] == 2048
    # a function that never settles is a named error, not a hang
    backend.get_function("stellaris-evaluator").state = "Pending"
    with pytest.raises(DeployError, match="did not settle in 0 s .State Pending"):
        wait_settled(aws["lambda"], "stellaris-evaluator", timeout_s=0.0)


def test_architecture_change_updates_the_code(aws: dict[str, Any]) -> None:
    push_image(aws["ecr"])
    execute(plan_aws(aws, settings(), REGION), aws)  # Lambda's default: x86_64
    plan = plan_aws(aws, settings(architecture="arm64"), REGION)
    code = [s for s in plan.changes if s.kind == "function-code"]
    assert len(code) == 3
    assert code[0].reason == "architecture x86_64 -> arm64"
    assert code[0].params == {"FunctionName": "stellaris-actor", "ImageUri": URI,
                              "Architectures": ["arm64"]}
    # UpdateFunctionCode takes it (botocore validates the request); moto keeps x86_64 anyway,
    # so the effect itself is AWS's to show.
    execute(plan, aws)
    assert plan_aws(aws, settings(architecture="x86_64"), REGION).is_noop


def test_deployer_policy_is_enough(aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """deploy, redeploy and destroy --all as a user holding only the documented policy.

    moto checks a caller's actions, not resources (it authorises every call against "*"),
    so the policy's resources are widened to "*" here; its action list is what is tested.
    moto cannot check SigV4 on Lambda's REST paths (every Lambda call fails its signature
    check), so Lambda's own actions go unchecked; IAM's, ECR's and STS's are enforced.
    """
    from moto.awslambda.responses import LambdaResponse
    from moto.core.authorization import enable_iam_authentication

    monkeypatch.setattr(LambdaResponse, "_authenticate_and_authorize_normal_action",
                        lambda self, resource="*": None)

    push_image(aws["ecr"])
    iam = aws["iam"]
    policy = deployer_policy("aws", "stellaris", REPO)
    for st in policy["Statement"]:
        st["Resource"] = "*"
    iam.create_user(UserName="deployer")
    iam.put_user_policy(UserName="deployer", PolicyName="stellaris-deploy",
                        PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="deployer")["AccessKey"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    base = ["deploy", "--target", "aws", "--region", REGION, "--image-uri", URI]
    with enable_iam_authentication():
        assert deploy_cli.main(base) == 0, capsys.readouterr().err
        assert "applied 4 changes" in capsys.readouterr().out
        assert deploy_cli.main(base) == 0 and "no changes" in capsys.readouterr().out
        assert deploy_cli.main(["destroy", "--target", "aws", "--region", REGION, "--all",
                                "--image-uri", URI]) == 0, capsys.readouterr().err
    # the same check denies what the policy leaves out
    narrow = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["sts:GetCallerIdentity", "iam:GetRole"], "Resource": "*"}]}
    iam.put_user_policy(UserName="deployer", PolicyName="stellaris-deploy",
                        PolicyDocument=json.dumps(narrow))
    with enable_iam_authentication():
        assert deploy_cli.main(base) == 3
    assert "permission denied: ecr:DescribeRepositories" in capsys.readouterr().err


def test_own_role_gains_the_vpc_policy_when_a_vpc_is_added(aws: dict[str, Any]) -> None:
    push_image(aws["ecr"])
    execute(plan_aws(aws, settings(), REGION), aws)  # deploy's role: the basic policy only
    vpc = {"SubnetIds": ["subnet-1"], "SecurityGroupIds": ["sg-1"]}
    plan = plan_aws(aws, settings(vpc=vpc), REGION)
    role = plan.steps[0]
    assert (role.action, role.kind, role.reason) == (
        "update", "iam-role", "attach AWSLambdaVPCAccessExecutionRole")
    execute(plan, aws)
    attached = aws["iam"].list_attached_role_policies(RoleName="stellaris-lambda")
    assert len(attached["AttachedPolicies"]) == 2
    assert plan_aws(aws, settings(vpc=vpc), REGION).is_noop
    # a role of that name that deploy did not create is checked, never changed
    aws["iam"].untag_role(RoleName="stellaris-lambda", TagKeys=[MANAGED_TAG[0]])
    aws["iam"].detach_role_policy(RoleName="stellaris-lambda", PolicyArn=VPC_POLICY)
    with pytest.raises(DeployError, match="does not allow ec2:CreateNetworkInterface"):
        plan_aws(aws, settings(vpc=vpc), REGION)
