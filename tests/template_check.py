"""Translates infra/template.yaml with AWS SAM's own translator (the
`samtranslator` package cfn-lint depends on) in both identity modes, with
and without the S3 Vectors bucket, and checks what the deployed API and
roles would be:

- jwt: every route but GET /health is behind the JWT authorizer;
  api_key: no route has an authorizer and no authorizer is defined;
- no function's environment holds an API key, and the functions that call
  a model are the ones given the model access policy;
- the vector bucket (skald-vectors-<the stack id's UUID>) exists only with
  VectorBucket=Enabled; every function gets SKALD_INDEX_BACKEND and
  SKALD_VECTOR_BUCKET (the bucket's name, else empty); each function's
  s3vectors actions are exactly its list below, on the accounts' index
  ARNs (.../bucket/<name>/index/skald-*) only, and none without the bucket;
- the template's Rules refuse IndexBackend=s3vectors without the bucket
  (and jwt mode without an issuer), and accept the deployments above.

    python3 tests/template_check.py [TEMPLATE]  # "template: N checks passed"

Exit status 0 when every check passes, 1 with the failures listed, 2 when
samtranslator is not installed. tests/tests/it/template.rs runs it.
"""

import copy
import os
import re
import sys

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
try:
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse
except ImportError:
    print("samtranslator is not installed (pip install aws-sam-translator, or cfn-lint)", file=sys.stderr)
    sys.exit(2)

TEMPLATE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "infra", "template.yaml")
MODEL_FUNCTIONS = {"SearchContextFunction", "RecallPresetFunction", "SessionsFunction", "McpFunction", "ExtractorFunction"}
# The functions that run context mode, whose reranker may need its key.
RERANK_FUNCTIONS = {"SearchContextFunction", "RecallPresetFunction", "McpFunction"}
# Each function's S3 Vectors actions with the bucket enabled. A reader's
# query filters on metadata and returns it, which S3 Vectors allows only
# with GetVectors besides QueryVectors; the indexer also writes, deletes,
# and looks up and creates an account's index. Sessions never reads one.
VECTOR_READ = {"s3vectors:QueryVectors", "s3vectors:GetVectors"}
VECTOR_ACTIONS = {
    "FindFunction": VECTOR_READ,
    "SearchContextFunction": VECTOR_READ,
    "RecallPresetFunction": VECTOR_READ,
    "BootstrapFunction": VECTOR_READ,
    "ContentFunction": VECTOR_READ,
    "McpFunction": VECTOR_READ,
    "IndexerFunction": VECTOR_READ
    | {"s3vectors:PutVectors", "s3vectors:DeleteVectors", "s3vectors:GetIndex", "s3vectors:CreateIndex", "s3vectors:UpdateIndexMode"},
    "SessionsFunction": set(),
    "ExtractorFunction": VECTOR_READ,
}
# Pseudo parameters to render names and ARNs with.
STACK_UUID = "0a1b2c3d-4e5f-6789-abcd-ef0123456789"
PSEUDO = {
    "AWS::StackId": f"arn:aws:cloudformation:us-east-1:123456789012:stack/skald/{STACK_UUID}",
    "AWS::StackName": "skald",
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::AccountId": "123456789012",
    "AWS::URLSuffix": "amazonaws.com",
}
VECTOR_BUCKET = f"skald-vectors-{STACK_UUID}"
INDEX_ARNS = f"arn:aws:s3vectors:us-east-1:123456789012:bucket/{VECTOR_BUCKET}/index/skald-*"


class NoManagedPolicies:
    def load(self):
        return {}


def resolve(value, conditions):
    """Resolves Fn::If (by the given condition values) and drops NoValue."""
    if isinstance(value, dict):
        if set(value) == {"Fn::If"}:
            name, yes, no = value["Fn::If"]
            return resolve(yes if conditions[name] else no, conditions)
        out = {}
        for key, item in value.items():
            item = resolve(item, conditions)
            if item != {"Ref": "AWS::NoValue"}:
                out[key] = item
        return out
    if isinstance(value, list):
        return [item for item in (resolve(v, conditions) for v in value) if item != {"Ref": "AWS::NoValue"}]
    return value


def parameter_values(template, given):
    """The parameters' values: the given ones, else their defaults (a
    CommaDelimitedList as a list)."""
    values = {}
    for name, spec in template.get("Parameters", {}).items():
        value = given.get(name, spec.get("Default", ""))
        if spec.get("Type") == "CommaDelimitedList" and isinstance(value, str):
            value = value.split(",")
        values[name] = value
    return values


def evaluate(value, template, values):
    """Evaluates a condition or rule expression: Fn::Equals, And, Or, Not,
    Contains, Condition, and Ref to a parameter or pseudo parameter."""
    if isinstance(value, dict):
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return values[arg] if arg in values else PSEUDO[arg]
        if fn == "Condition":
            return evaluate(template["Conditions"][arg], template, values)
        args = [evaluate(a, template, values) for a in (arg if isinstance(arg, list) else [arg])]
        if fn == "Fn::Equals":
            return args[0] == args[1]
        if fn == "Fn::And":
            return all(args)
        if fn == "Fn::Or":
            return any(args)
        if fn == "Fn::Not":
            return not args[0]
        if fn == "Fn::Contains":
            return args[1] in args[0]
        raise ValueError(f"cannot evaluate {fn}")
    if isinstance(value, list):
        return [evaluate(v, template, values) for v in value]
    return value


def failing_rules(template, values):
    """The names of the Rules whose assertions fail with these values."""
    failing = []
    for name, rule in template.get("Rules", {}).items():
        if "RuleCondition" in rule and not evaluate(rule["RuleCondition"], template, values):
            continue
        if not all(evaluate(a["Assert"], template, values) for a in rule["Assertions"]):
            failing.append(name)
    return failing


def render(value, values):
    """A resolved value as the deployed string: Fn::Sub (both forms),
    Fn::Select, Fn::Split and Ref to a parameter or pseudo parameter."""
    if isinstance(value, str):
        return value
    ((fn, arg),) = value.items()
    if fn == "Ref":
        return values[arg] if arg in values else PSEUDO[arg]
    if fn == "Fn::Split":
        return render(arg[1], values).split(arg[0])
    if fn == "Fn::Select":
        return render(arg[1], values)[int(arg[0])]
    if fn == "Fn::Sub":
        text, variables = (arg, {}) if isinstance(arg, str) else arg
        names = dict(values, **PSEUDO, **{k: render(v, values) for k, v in variables.items()})
        return re.sub(r"\$\{([^}!]+)\}", lambda m: str(names[m.group(1)]), text)
    raise ValueError(f"cannot render {fn}")


def as_list(value):
    return value if isinstance(value, list) else [value]


def statements(document):
    return as_list(document.get("Statement", []))


def vector_statements(role, resources):
    """The statements of a function's role, inline and in the attached
    managed policies of this template, that grant any s3vectors action."""
    properties = role.get("Properties", {})
    found = [st for policy in properties.get("Policies", []) for st in statements(policy["PolicyDocument"])]
    for arn in properties.get("ManagedPolicyArns", []):
        if isinstance(arn, dict) and set(arn) == {"Ref"} and arn["Ref"] in resources:
            found += statements(resources[arn["Ref"]]["Properties"]["PolicyDocument"])
    return [st for st in found if any(a.lower().startswith("s3vectors:") for a in as_list(st.get("Action", [])))]


def translate(parameters):
    template = yaml_parse(open(TEMPLATE).read())
    for resource in template["Resources"].values():
        properties = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if key in properties:
                properties[key] = "s3://bucket/key.zip"
    return transform(copy.deepcopy(template), parameters, NoManagedPolicies())


def main():
    failures, checks = [], 0

    def check(ok, message):
        nonlocal checks
        checks += 1
        if not ok:
            failures.append(message)

    jwt = {"IdentityMode": "jwt", "JwtIssuer": "https://issuer.example", "JwtAudience": "client"}
    vectors = {"VectorBucket": "Enabled"}
    source = yaml_parse(open(TEMPLATE).read())

    # The Rules CloudFormation checks before it deploys anything (the
    # translator passes them through unevaluated).
    for mode, parameters, want in [
        ("jwt", jwt, []),
        ("api_key", {"IdentityMode": "api_key"}, []),
        ("api_key+vectors", dict(IdentityMode="api_key", **vectors), []),
        ("jwt+vectors+s3vectors", dict(jwt, IndexBackend="s3vectors", **vectors), []),
        ("api_key+s3vectors", {"IdentityMode": "api_key", "IndexBackend": "s3vectors"}, ["S3VectorsBackendNeedsTheVectorBucket"]),
        ("jwt without issuer", {"IdentityMode": "jwt", "JwtAudience": "client"}, ["JwtModeNeedsIssuerAndAudience"]),
    ]:
        got = failing_rules(source, parameter_values(source, parameters))
        check(got == want, f"{mode}: failing rules {got}, expected {want}")

    for mode, parameters in [
        ("jwt", jwt),
        ("api_key", {"IdentityMode": "api_key"}),
        ("api_key+vectors", dict(IdentityMode="api_key", **vectors)),
        ("jwt+vectors+s3vectors", dict(jwt, IndexBackend="s3vectors", **vectors)),
        ("api_key+e5", {"IdentityMode": "api_key", "Embedder": "use-m3+e5"}),
    ]:
        uses_jwt = parameters["IdentityMode"] == "jwt"
        has_vectors = parameters.get("VectorBucket") == "Enabled"
        uses_e5 = parameters.get("Embedder") == "use-m3+e5"
        try:
            out = translate(parameters)
        except Exception as error:  # the translator's own validation errors
            failures.append(f"{mode}: the template does not translate: {error}")
            continue
        values = parameter_values(out, parameters)
        conditions = {name: bool(evaluate(c, out, values)) for name, c in out.get("Conditions", {}).items()}
        check(conditions.get("UsesJwt") == uses_jwt, f"{mode}: UsesJwt is {conditions.get('UsesJwt')}")
        check(conditions.get("HasVectorBucket") == has_vectors, f"{mode}: HasVectorBucket is {conditions.get('HasVectorBucket')}")
        check(conditions.get("UsesE5") == uses_e5, f"{mode}: UsesE5 is {conditions.get('UsesE5')}")
        # The resources (and outputs) this deployment would create.
        resources = {
            name: resource
            for name, resource in resolve(out["Resources"], conditions).items()
            if conditions.get(resource.get("Condition"), True)
        }
        outputs = {
            name: output
            for name, output in resolve(out.get("Outputs", {}), conditions).items()
            if conditions.get(output.get("Condition"), True)
        }
        buckets = [r for r in resources.values() if r["Type"] == "AWS::S3Vectors::VectorBucket"]
        check(len(buckets) == has_vectors, f"{mode}: {len(buckets)} vector buckets, expected {int(has_vectors)}")
        for bucket in buckets:
            name = render(bucket["Properties"].get("VectorBucketName", ""), values)
            check(name == VECTOR_BUCKET, f"{mode}: the vector bucket is named {name!r}, expected {VECTOR_BUCKET!r}")
        output = render(outputs["VectorBucketName"]["Value"], values) if "VectorBucketName" in outputs else None
        want_output = VECTOR_BUCKET if has_vectors else None
        check(output == want_output, f"{mode}: output VectorBucketName {output!r}, expected {want_output!r}")
        layer_versions = sorted(n for n, r in resources.items() if r["Type"] == "AWS::Lambda::LayerVersion")
        check(len(layer_versions) == 1 + uses_e5, f"{mode}: layers {layer_versions}")
        functions = {name for name, r in resources.items() if r["Type"] == "AWS::Lambda::Function"}
        check(functions == set(VECTOR_ACTIONS), f"{mode}: functions {sorted(functions)}, expected {sorted(VECTOR_ACTIONS)}")
        body = resources["HttpApi"]["Properties"]["Body"]
        schemes = body.get("components", {}).get("securitySchemes", {})
        check(("Jwt" in schemes) == uses_jwt, f"{mode}: JWT authorizer defined: {'Jwt' in schemes}")
        for path, item in body["paths"].items():
            for method, operation in item.items():
                check("x-amazon-apigateway-integration" in operation, f"{mode}: {method} {path} has no integration")
                guarded = operation.get("security") == [{"Jwt": []}]
                want = uses_jwt and (method, path) != ("get", "/health")
                check(guarded == want, f"{mode}: {method.upper()} {path} behind the JWT: {guarded}, expected {want}")
        for name, resource in resources.items():
            if resource["Type"] != "AWS::Lambda::Function":
                continue
            variables = resource["Properties"].get("Environment", {}).get("Variables", {})
            plain = [v for v in variables if v.endswith("_API_KEY")]
            check(not plain, f"{mode}: {name} has API keys in its environment: {plain}")
            check(variables.get("SKALD_IDENTITY_MODE") == {"Ref": "IdentityMode"}, f"{mode}: {name} lacks the mode")
            check(variables.get("SKALD_EMBEDDER") == {"Ref": "Embedder"}, f"{mode}: {name} lacks the embedder")
            # A function that embeds carries USE-m3's layer, and e5's with
            # use-m3+e5 (SAM suffixes a layer's logical id with a hash).
            layers = [l.get("Ref", "") if isinstance(l, dict) else str(l) for l in resource["Properties"].get("Layers", [])]
            if layers:
                want_layers = ["UseM3Layer", "E5Layer"] if uses_e5 else ["UseM3Layer"]
                check(len(layers) == len(want_layers) and all(l.startswith(w) for l, w in zip(layers, want_layers)),
                      f"{mode}: {name}'s layers are {layers}, expected {want_layers}")
            check(variables.get("SKALD_INDEX_BACKEND") == {"Ref": "IndexBackend"}, f"{mode}: {name} lacks the index backend")
            backend = render(variables.get("SKALD_INDEX_BACKEND", ""), values)
            want_backend = parameters.get("IndexBackend", "segments")
            check(backend == want_backend, f"{mode}: {name}'s SKALD_INDEX_BACKEND is {backend!r}, expected {want_backend!r}")
            check("SKALD_VECTOR_BUCKET" in variables, f"{mode}: {name} lacks SKALD_VECTOR_BUCKET")
            bucket = render(variables.get("SKALD_VECTOR_BUCKET", ""), values)
            want_bucket = VECTOR_BUCKET if has_vectors else ""
            check(bucket == want_bucket, f"{mode}: {name}'s SKALD_VECTOR_BUCKET is {bucket!r}, expected {want_bucket!r}")
            role = resources.get(f"{name}Role", {})
            # Every action of a statement that grants an s3vectors one: such
            # a statement holds s3vectors actions only.
            granted = vector_statements(role, resources)
            actions = {a for st in granted for a in as_list(st.get("Action", []))}
            want_actions = VECTOR_ACTIONS.get(name, set()) if has_vectors else set()
            check(actions == want_actions, f"{mode}: {name}'s s3vectors statements grant {sorted(actions)}, expected {sorted(want_actions)}")
            for st in granted:
                scope = [render(r, values) for r in as_list(st.get("Resource", []))]
                check(st.get("Effect") == "Allow" and not st.get("NotAction") and not st.get("NotResource"),
                      f"{mode}: {name} has an s3vectors statement other than a plain Allow: {st}")
                check(scope == [INDEX_ARNS], f"{mode}: {name}'s s3vectors actions are on {scope}, expected [{INDEX_ARNS!r}]")
            conditions_on = dict(conditions, NeedsModelAccess=True)
            arns = resolve(out["Resources"].get(f"{name}Role", {}), conditions_on).get("Properties", {})
            has_policy = {"Ref": "ModelAccessPolicy"} in arns.get("ManagedPolicyArns", [])
            check(has_policy == (name in MODEL_FUNCTIONS), f"{name}: model access policy attached: {has_policy}")
            has_secret = "SKALD_LLM_API_KEY_SECRET" in variables
            check(has_secret == (name in MODEL_FUNCTIONS), f"{name}: given the key secret's ARN: {has_secret}")
            has_rerank = "SKALD_RERANK_API_KEY_SECRET" in variables
            check(has_rerank == (name in RERANK_FUNCTIONS), f"{name}: given the reranker's secret ARN: {has_rerank}")
    # S3 refuses two notification rules of one event type whose prefixes
    # and suffixes both overlap; every queue a function takes has a
    # dead-letter queue watched by an alarm, and the function reports
    # partial batch failures.
    bucket = source["Resources"]["StoreBucket"]["Properties"]["NotificationConfiguration"]["QueueConfigurations"]
    rules = []
    for config in bucket:
        filters = {r["Name"]: r["Value"] for r in config["Filter"]["S3Key"]["Rules"]}
        rules.append((config["Event"], filters.get("prefix", ""), filters.get("suffix", ""), config["Queue"]))
    for i, (event, prefix, suffix, _) in enumerate(rules):
        for other_event, other_prefix, other_suffix, _ in rules[i + 1:]:
            overlap = (
                event.split(":")[1] == other_event.split(":")[1]
                and (prefix.startswith(other_prefix) or other_prefix.startswith(prefix))
                and (suffix.endswith(other_suffix) or other_suffix.endswith(suffix))
            )
            check(not overlap, f"notification rules overlap: {event} {prefix}*{suffix} and {other_event} {other_prefix}*{other_suffix}")
    task_rules = [q for (e, p, x, q) in rules if x == ".task.json" and e.startswith("s3:ObjectCreated")]
    check(task_rules == [{"Fn::GetAtt": ["ExtractorQueue", "Arn"]}], f"commit tasks notify {task_rules}")
    alarmed = {
        r["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
        for r in source["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("Namespace") == "AWS/SQS"
    }
    for name, resource in source["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        for event in resource["Properties"].get("Events", {}).values():
            if event["Type"] != "SQS":
                continue
            queue = event["Properties"]["Queue"]["Fn::GetAtt"][0]
            dead = source["Resources"][queue]["Properties"].get("RedrivePolicy", {}).get("deadLetterTargetArn", {})
            dead = dead.get("Fn::GetAtt", [None])[0]
            check(dead is not None, f"{name}'s queue {queue} has no dead-letter queue")
            check(dead in alarmed, f"{name}'s dead-letter queue {dead} has no alarm")
            check(event["Properties"].get("FunctionResponseTypes") == ["ReportBatchItemFailures"], f"{name} fails whole batches")
    if failures:
        print("\n".join(failures))
        print(f"template: {len(failures)} of {checks} checks failed")
        return 1
    print(f"template: {checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
