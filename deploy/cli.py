"""``stellaris deploy | destroy | up | redis`` (``orchestrator/cli.py`` delegates here).

    stellaris deploy --target aws --region us-east-1 --image-uri <acct>.dkr.ecr.<r>.amazonaws.com/stellaris:1 \\
        --redis-url redis://my-cache:6379/0 [--role ARN] [--dry-run] [--json]
    stellaris deploy --target aws --export DIR [--image-uri URI] (a CloudFormation template, offline)
    stellaris deploy --target local --endpoint-url http://127.0.0.1:9000 [--redis-url URL] \\
        [--env-package PATH ...]
    stellaris destroy --target aws|local [--all]
    stellaris up                              (redis + local runtime + functions, until Ctrl-C)
    stellaris redis serve --port 6379         (a redis-server without Docker)
    stellaris redis ping --url redis://127.0.0.1:6379/0   (a health check)

``argv[0]`` is the subcommand. Exit codes: 0 done, 2 a deploy problem (bad input, missing
role, unmanaged function …), 3 permission denied, 4 endpoint unreachable, 5 missing image.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from deploy.aws import error_code, error_message, make_clients
from deploy.aws_plan import AwsSettings, parse_image_uri, plan_aws
from deploy.destroy import plan_destroy
from deploy.errors import DeployError, EndpointUnreachable, MissingImage
from deploy.execute import execute
from deploy.export import write_export
from deploy.function_plan import plan_local
from deploy.functions import HANDLERS, LOCAL_ROLE, function_specs
from deploy.package import build_function_zip
from deploy.plan import Plan
from deploy.services import cmd_redis, cmd_up

DEFAULT_ENDPOINT = "http://127.0.0.1:9000"


def _region_of(clients: dict[str, Any]) -> str | None:
    return clients["lambda"].meta.region_name


# -- argument parsing -------------------------------------------------------------------------
def _kv(items: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise DeployError(f"{flag} expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out


def _csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", choices=["aws", "local"], default="local",
                   help="AWS Lambda, or the local runtime at --endpoint-url (default)")
    p.add_argument("--region", default=None, help="AWS region (default: the AWS profile's)")
    p.add_argument("--endpoint-url", default=None,
                   help=f"Lambda endpoint (local target default {DEFAULT_ENDPOINT})")
    p.add_argument("--prefix", default="stellaris", help="function names are <prefix>-actor …")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")


def deploy_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stellaris deploy",
                                description="Create or update the Stellaris functions (idempotent).")
    _common(p)
    p.add_argument("--image-uri", help="ECR image of deploy/Dockerfile.function (aws target)")
    p.add_argument("--role", help="existing Lambda execution role ARN (default: deploy ensures "
                                  "<prefix>-lambda with the basic execution policy)")
    p.add_argument("--redis-url", help="the Redis the functions use (their REDIS_URL); on AWS a "
                                       "Redis reachable from Lambda, e.g. ElastiCache in the VPC")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="more function environment variables")
    p.add_argument("--actor-memory-mb", type=int, default=1769,
                   help="actor function memory, MB (default 1769: one vCPU on Lambda)")
    p.add_argument("--learner-memory-mb", type=int, default=1769,
                   help="learner function memory, MB (default 1769)")
    p.add_argument("--evaluator-memory-mb", type=int, default=None,
                   help="evaluator function memory, MB (default: the actor's)")
    p.add_argument("--timeout-s", type=int, default=300, help="function timeout, s (default 300)")
    p.add_argument("--reserved", action="append", default=[], metavar="FUNCTION=N",
                   help="reserved concurrency, e.g. --reserved actor=64")
    p.add_argument("--subnet-ids", help="VPC subnets (comma-separated) so functions reach ElastiCache")
    p.add_argument("--security-group-ids", help="VPC security groups (comma-separated)")
    p.add_argument("--architecture", choices=["x86_64", "arm64"], default=None,
                   help="the image's architecture (default: Lambda's, x86_64)")
    p.add_argument("--repository-only", action="store_true",
                   help="only ensure the ECR repository (before the first docker push)")
    p.add_argument("--env-package", action="append", default=[], metavar="PATH",
                   help="local target: a custom env's package folder (the one holding its "
                        "__init__.py) to ship at the root of the functions' zip, so "
                        "--env <package>.<module>:<EnvId> runs there; repeatable. The aws "
                        "target ships an image: COPY the package into it instead "
                        "(deploy/Dockerfile.function)")
    p.add_argument("--export", metavar="DIR",
                   help="aws target: write a CloudFormation template of everything a run needs "
                        "(functions, role, logs, security groups, ElastiCache) with its "
                        "parameters and README into DIR, offline; deploys nothing")
    return p


def destroy_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stellaris destroy",
                                description="Remove the functions (and resources) deploy created.")
    _common(p)
    p.add_argument("--role-name", help="also delete this IAM role if deploy created it")
    p.add_argument("--repository", help="also delete this ECR repository (and its images) if "
                                        "deploy created it")
    p.add_argument("--all", action="store_true",
                   help="also the role <prefix>-lambda and, with --image-uri, its repository")
    p.add_argument("--image-uri", help="the image whose repository --all deletes")
    return p


# -- commands ---------------------------------------------------------------------------------
def _endpoint(args: argparse.Namespace) -> str | None:
    if args.target == "local":
        return args.endpoint_url or DEFAULT_ENDPOINT
    return args.endpoint_url


def _print_json(plan: Plan, args: argparse.Namespace, applied: list[str] | None) -> None:
    doc = plan.to_json()
    doc["dry_run"] = bool(args.dry_run)
    doc["applied"] = applied
    print(json.dumps(doc, indent=2, default=str))


def _finish(plan: Plan, args: argparse.Namespace, clients: dict[str, Any]) -> int:
    """Print the plan; unless --dry-run (or a problem blocks it), execute it."""
    if args.dry_run or plan.problems:
        if args.json:
            _print_json(plan, args, None)
        else:
            print(plan.render())
        if plan.problems:
            raise _problem_error(plan.problems[0])
        if not args.json:
            print("dry run: nothing changed")
        return 0
    if not args.json:
        print(plan.render(), flush=True)
    done = execute(plan, clients)
    if args.json:
        _print_json(plan, args, done)
    else:
        print(f"applied {len(done)} change{'s' if len(done) != 1 else ''}" if done else "no changes")
    return 0


def _problem_error(problem: str) -> DeployError:
    if problem.startswith("image "):
        return MissingImage(problem)
    return DeployError(problem)


def cmd_deploy(argv: list[str]) -> int:
    args = deploy_parser().parse_args(argv)
    env = _kv(args.env, "--env")
    if args.redis_url:
        env["REDIS_URL"] = args.redis_url
    reserved = {k: int(v) for k, v in _kv(args.reserved, "--reserved").items()}
    unknown = set(reserved) - set(HANDLERS)
    if unknown:
        raise DeployError(f"--reserved: unknown function {sorted(unknown)[0]!r} "
                          f"(expected {', '.join(HANDLERS)})")
    specs = function_specs(args.prefix, args.actor_memory_mb, args.learner_memory_mb, args.timeout_s,
                           env, evaluator_memory_mb=args.evaluator_memory_mb,
                           reserved_concurrency=reserved)
    if args.env_package and args.target != "local":
        # Lambda runs our image, not a zip: the package must be in the image.
        raise DeployError("--env-package ships in the local target's zip; on AWS the functions "
                          "run the image, so build it with the package copied in (COPY <pkg>/ "
                          "${LAMBDA_TASK_ROOT}/<pkg>/ in deploy/Dockerfile.function, see "
                          "docs/deploy.md) and deploy without --env-package")
    if args.export:
        return _export(args, specs)
    code = build_function_zip(env_packages=args.env_package) if args.target == "local" else None
    endpoint = _endpoint(args)
    clients = make_clients(args.target, args.region, endpoint)
    if code is not None:
        try:
            plan = plan_local(clients["lambda"], specs, code, LOCAL_ROLE, endpoint)
        except EndpointUnreachable:
            raise EndpointUnreachable(
                f"local runtime unreachable at {endpoint}: start it with `stellaris runtime serve` "
                "or `stellaris up`"
            ) from None
        return _finish(plan, args, clients)
    if not args.image_uri:
        raise DeployError("--target aws needs --image-uri (an ECR image of deploy/Dockerfile.function)")
    vpc = None
    if args.subnet_ids or args.security_group_ids:
        if not (args.subnet_ids and args.security_group_ids):
            raise DeployError("VPC config needs both --subnet-ids and --security-group-ids")
        vpc = {"SubnetIds": _csv(args.subnet_ids), "SecurityGroupIds": _csv(args.security_group_ids)}
    settings = AwsSettings(args.image_uri, specs, role_arn=args.role, role_name=f"{args.prefix}-lambda",
                           vpc=vpc, architecture=args.architecture,
                           repository_only=args.repository_only)
    plan = plan_aws(clients, settings, _region_of(clients))
    return _finish(plan, args, clients)


def _export(args: argparse.Namespace, specs: list[Any]) -> int:
    """The template and its companions, from the specs alone: no credentials, no calls."""
    import boto3

    if args.target != "aws":
        raise DeployError("--export writes the AWS template: add --target aws")
    if args.security_group_ids:
        raise DeployError("--export creates the security groups: drop --security-group-ids")
    if args.image_uri:
        parse_image_uri(args.image_uri)
    partition = boto3.session.Session().get_partition_for_region(args.region or "us-east-1")
    written = write_export(Path(args.export), specs, image_uri=args.image_uri,
                           architecture=args.architecture, redis_url=args.redis_url,
                           subnet_ids=_csv(args.subnet_ids) or None, partition=partition)
    for path in written:
        print(f"wrote {path}")
    print(f"next: aws cloudformation deploy --template-file {Path(args.export) / 'template.json'} "
          f"--stack-name {args.prefix} --capabilities CAPABILITY_IAM --parameter-overrides ... "
          f"(see {Path(args.export) / 'README.md'})")
    return 0


def cmd_destroy(argv: list[str]) -> int:
    args = destroy_parser().parse_args(argv)
    endpoint = _endpoint(args)
    clients = make_clients(args.target, args.region, endpoint)
    role_name = args.role_name or (f"{args.prefix}-lambda" if args.all else None)
    repository = args.repository
    if args.all and args.image_uri and not repository:
        repository = str(parse_image_uri(args.image_uri)["repo"])
    try:
        plan = plan_destroy(clients, args.prefix, list(HANDLERS), args.target,
                            region=_region_of(clients) if args.target == "aws" else None,
                            endpoint_url=endpoint, role_name=role_name, repository=repository)
    except EndpointUnreachable:
        if args.target == "local":
            raise EndpointUnreachable(f"local runtime unreachable at {endpoint}") from None
        raise
    return _finish(plan, args, clients)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    try:
        if command == "deploy":
            return cmd_deploy(rest)
        if command == "destroy":
            return cmd_destroy(rest)
        if command == "up":
            return cmd_up(rest)
        if command == "redis":
            return cmd_redis(rest)
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ClientError as exc:  # an AWS error the planner did not expect: still one line
        print(f"error: {exc.operation_name}: {error_code(exc)}: {error_message(exc)}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    print(f"error: unknown command {command!r} (deploy, destroy, up, redis)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
