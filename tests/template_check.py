"""Translates infra/template.yaml with AWS SAM's own translator (the
`samtranslator` package cfn-lint depends on) in both identity modes and
checks what the deployed API and roles would be:

- jwt: every route but GET /health is behind the JWT authorizer;
  api_key: no route has an authorizer and no authorizer is defined;
- no function's environment holds an API key, and the functions that call
  a model are the ones given the model access policy.

    python3 tests/template_check.py [TEMPLATE]  # "template: N checks passed"

Exit status 0 when every check passes, 1 with the failures listed, 2 when
samtranslator is not installed. tests/tests/it/template.rs runs it.
"""

import copy
import os
import sys

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
try:
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse
except ImportError:
    print("samtranslator is not installed (pip install aws-sam-translator, or cfn-lint)", file=sys.stderr)
    sys.exit(2)

TEMPLATE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "infra", "template.yaml")
MODEL_FUNCTIONS = {"SearchContextFunction", "RecallPresetFunction", "SessionsFunction", "McpFunction"}


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

    for mode, parameters, uses_jwt in [
        ("jwt", {"IdentityMode": "jwt", "JwtIssuer": "https://issuer.example", "JwtAudience": "client"}, True),
        ("api_key", {"IdentityMode": "api_key"}, False),
    ]:
        try:
            out = translate(parameters)
        except Exception as error:  # the translator's own validation errors
            failures.append(f"{mode}: the template does not translate: {error}")
            continue
        conditions = {name: False for name in out.get("Conditions", {})}
        conditions["UsesJwt"] = uses_jwt
        resources = resolve(out["Resources"], conditions)
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
            conditions_on = dict(conditions, NeedsModelAccess=True)
            arns = resolve(out["Resources"].get(f"{name}Role", {}), conditions_on).get("Properties", {})
            has_policy = {"Ref": "ModelAccessPolicy"} in arns.get("ManagedPolicyArns", [])
            check(has_policy == (name in MODEL_FUNCTIONS), f"{name}: model access policy attached: {has_policy}")
            has_secret = "SKALD_LLM_API_KEY_SECRET" in variables
            check(has_secret == (name in MODEL_FUNCTIONS), f"{name}: given the key secret's ARN: {has_secret}")
    if failures:
        print("\n".join(failures))
        print(f"template: {len(failures)} of {checks} checks failed")
        return 1
    print(f"template: {checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
