from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from config_helpers import EXAMPLES, aws_pool, cluster_problems, dump, gcp_pool

from corral.domain.config import (
    AwsProvider,
    ClusterConfig,
    ConfigError,
    GcpProvider,
    Ownership,
    load_cluster_config,
)
from corral.domain.offerings import CapacityType


def one_pool(**provider: Any) -> dict[str, Any]:
    return {"resource_pools": [aws_pool(**provider)]}


def test_minimal_aws_pool_has_determined_defaults() -> None:
    loaded = load_cluster_config(dump(one_pool()))
    # Only that no instance profile is known (tests/unit/config/test_agent_identity.py).
    assert [w.split(":")[0] for w in loaded.warnings] == [
        "resource_pools[0].provider.iam_instance_profile_arn"
    ]
    pool = loaded.config.default_pool
    p = pool.provider
    assert isinstance(p, AwsProvider)
    assert (p.min_instances, p.max_instances) == (0, 5)
    assert p.max_idle_agent_period == 1200.0
    assert p.max_agent_starting_period == 1200.0
    assert p.root_volume_size == 200
    assert (p.tag_key, p.tag_value, p.instance_name) == ("managed-by", "corral", "corral-agent")
    assert p.agent_docker_network == "corral"
    assert p.agent_docker_runtime == "runc"
    assert (p.agent_reconnect_attempts, p.agent_reconnect_backoff) == (5, 5.0)
    assert p.launch_error_retries == 3
    assert p.on_demand_fallback is True
    assert p.capacity_memory_period == 180.0
    assert p.network_interface.public_ip is True
    assert pool.ownership == Ownership("managed-by", "corral")
    assert (pool.min_instances, pool.max_instances, pool.max_idle_s) == (0, 5, 1200.0)
    assert (pool.starting_deadline_s, pool.capacity_memory_s) == (1200.0, 180.0)
    assert pool.monthly_budget_usd is None
    assert loaded.config.default_pool_name == "default"


def test_config_is_frozen() -> None:
    config = load_cluster_config(dump(one_pool())).config
    with pytest.raises(ValueError, match="frozen"):
        config.resource_pools[0].provider.max_instances = 9  # type: ignore[misc]


def test_max_below_min_is_reported_at_max_instances() -> None:
    assert cluster_problems(one_pool(min_instances=3, max_instances=2)) == [
        "resource_pools[0].provider.max_instances: must be >= min_instances"
    ]


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_numbers_must_be_finite(value: float) -> None:
    # An infinite budget was accepted, then every pool listing answered "Infinity", which
    # is not JSON (the dashboard could not read it).
    assert cluster_problems(one_pool(monthly_budget_usd=value)) == [
        "resource_pools[0].provider.monthly_budget_usd: must be a finite number"
    ]


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("max_instances", True, "must be an integer"),
        ("min_instances", False, "must be an integer"),
        ("max_instances", "5", "must be an integer"),
        ("root_volume_size", "200", "must be an integer"),
        ("spot", "yes", "must be true or false"),
        ("on_demand_fallback", 1, "must be true or false"),
        ("monthly_budget_usd", True, "must be a number"),
        ("monthly_budget_usd", "lots", "must be a number"),
    ],
)
def test_scalars_are_not_coerced_across_kinds(field: str, value: object, reason: str) -> None:
    # pydantic's lax mode read `max_instances: true` as 1 and `spot: 'yes'` as true.
    assert cluster_problems(one_pool(**{field: value})) == [
        f"resource_pools[0].provider.{field}: {reason}"
    ]


def test_a_float_field_takes_an_integer_and_exponent_notation() -> None:
    config = load_cluster_config(dump(one_pool(monthly_budget_usd=100)))
    assert config.config.default_pool.provider.monthly_budget_usd == 100.0
    # YAML 1.1 (PyYAML) reads 1e4 without a dot as a string.
    text = dump(one_pool()).replace("type: aws\n", "type: aws\n    monthly_budget_usd: 1e4\n")
    assert load_cluster_config(text).config.default_pool.provider.monthly_budget_usd == 1e4


def test_spot_max_price_needs_spot() -> None:
    assert cluster_problems(one_pool(spot_max_price="0.90")) == [
        "resource_pools[0].provider.spot_max_price: only allowed with spot: true"
    ]
    provider = load_cluster_config(dump(one_pool(spot=True, spot_max_price="0.90")))
    assert provider.config.default_pool.provider.spot_max_price == Decimal("0.90")  # type: ignore[union-attr]


def test_unknown_instance_type_needs_instance_slots() -> None:
    assert cluster_problems(one_pool(instance_type=["p3.8xlarge", "x9.large"])) == [
        "resource_pools[0].provider.instance_slots: required because instance type "
        "'x9.large' is not in the catalog (set the number of GPUs it has)"
    ]
    ok = load_cluster_config(dump(one_pool(instance_type="x9.large", instance_slots=2)))
    assert [o.slots for o in ok.config.default_pool.offerings()] == [2]


def test_duplicate_pool_names() -> None:
    data = {"resource_pools": [aws_pool(), aws_pool()]}
    assert cluster_problems(data) == [
        "resource_pools[1].name: duplicate pool name 'default' (also resource_pools[0])"
    ]


def test_default_pool_must_exist() -> None:
    data = {**one_pool(), "default_resource_pool": "big"}
    assert cluster_problems(data) == ["default_resource_pool: no pool named 'big' (pools: default)"]


def test_default_pool_defaults_to_first() -> None:
    second = aws_pool()
    second["name"] = "second"
    config = load_cluster_config(dump({"resource_pools": [aws_pool(), second]})).config
    assert config.default_pool_name == "default"
    assert config.pool("second").name == "second"
    assert config.pool(None).name == "default"
    with pytest.raises(KeyError):
        config.pool("nope")


def test_field_errors_are_all_reported_with_paths() -> None:
    data = one_pool(
        root_volume_size=50,
        region="US East",
        image_id="<AMI id>",
        tag_key="aws:owner",
        typo_field=1,
        network_interface={"subnet_id": ["subnet-1", "vpc-2"], "security_group_id": "x"},
        iam_instance_profile_arn="arn:aws:iam::123:role/x",
    )
    assert cluster_problems(data) == [
        "resource_pools[0].provider.region: must be an AWS region such as us-east-1, got 'US East'",
        "resource_pools[0].provider.image_id: must be an AMI id such as ami-0123456789abcdef0, "
        "got '<AMI id>'",
        "resource_pools[0].provider.root_volume_size: must be >= 100",
        "resource_pools[0].provider.tag_key: must not start with 'aws:' (reserved by AWS)",
        "resource_pools[0].provider.iam_instance_profile_arn: must be an instance profile ARN "
        "such as arn:aws:iam::123456789012:instance-profile/corral-agent",
        "resource_pools[0].provider.network_interface.subnet_id[1]: must be a subnet id "
        "(subnet-...), got 'vpc-2'",
        "resource_pools[0].provider.network_interface.security_group_id: must be a security "
        "group id (sg-...), got 'x'",
        "resource_pools[0].provider.typo_field: unknown field",
    ]


def test_discriminator_problems() -> None:
    data = {"resource_pools": [aws_pool(type="azure"), {"name": "b", "provider": {}}]}
    assert cluster_problems(data) == [
        "resource_pools[0].provider.type: must be one of 'aws', 'gcp' (got 'azure')",
        "resource_pools[1].provider.type: required",
    ]


def test_empty_and_missing_pools() -> None:
    assert cluster_problems({"resource_pools": []}) == ["resource_pools: must not be empty"]
    assert cluster_problems({"default_resource_pool": "x"}) == ["resource_pools: required"]
    assert cluster_problems({"resource_pools": [{"provider": aws_pool()["provider"]}]}) == [
        "resource_pools[0].name: required"
    ]


def test_custom_tags_cannot_override_ownership() -> None:
    data = one_pool(custom_tags=[{"key": "team", "value": "a"}, {"key": "managed-by"}])
    assert cluster_problems(data) == [
        "resource_pools[0].provider.custom_tags[1].key: 'managed-by' is set by Corral "
        "(ownership tag or instance name)"
    ]


def test_simulation_key_is_tolerated() -> None:
    config = load_cluster_config(dump({**one_pool(), "simulation": {"seed": 1}})).config
    assert config.simulation == {"seed": 1}


def test_unknown_top_level_key_is_an_error() -> None:
    assert cluster_problems({**one_pool(), "resource_pool": "x"}) == [
        "resource_pool: unknown field"
    ]


def test_pool_name_alias() -> None:
    data = {"resource_pools": [{"pool_name": "gpu", "provider": aws_pool()["provider"]}]}
    assert load_cluster_config(dump(data)).config.pool_names == ("gpu",)


# --- offerings


def test_aws_offerings_spot_first_then_on_demand_in_config_order() -> None:
    data = one_pool(
        instance_type=["g5.xlarge", "g5.12xlarge"],
        network_interface={"subnet_id": ["subnet-a", "subnet-b"]},
        spot=True,
    )
    offerings = load_cluster_config(dump(data)).config.default_pool.offerings()
    assert [(o.instance_type, o.location, o.capacity_type.value) for o in offerings] == [
        ("g5.xlarge", "subnet-a", "spot"),
        ("g5.xlarge", "subnet-b", "spot"),
        ("g5.12xlarge", "subnet-a", "spot"),
        ("g5.12xlarge", "subnet-b", "spot"),
        ("g5.xlarge", "subnet-a", "on-demand"),
        ("g5.xlarge", "subnet-b", "on-demand"),
        ("g5.12xlarge", "subnet-a", "on-demand"),
        ("g5.12xlarge", "subnet-b", "on-demand"),
    ]
    assert [o.slots for o in offerings[:4]] == [1, 1, 4, 4]
    assert offerings[0].hourly_price == 0.40
    assert offerings[4].hourly_price == 1.006


def test_aws_offerings_without_fallback_or_spot() -> None:
    spot_only = one_pool(spot=True, on_demand_fallback=False)
    offerings = load_cluster_config(dump(spot_only)).config.default_pool.offerings()
    assert [(o.location, o.capacity_type) for o in offerings] == [("us-east-1", CapacityType.SPOT)]
    on_demand = load_cluster_config(dump(one_pool())).config.default_pool.offerings()
    assert [o.capacity_type for o in on_demand] == [CapacityType.ON_DEMAND]
    assert on_demand[0].slots == 4


def test_unknown_type_is_priced_zero_and_cpu_slots() -> None:
    data = one_pool(instance_type="x9z.xlarge", instance_slots=0, cpu_slots_allowed=True)
    (offering,) = load_cluster_config(dump(data)).config.default_pool.offerings()
    assert (offering.slots, offering.hourly_price) == (1, 0.0)


def test_gcp_pool_offerings_and_defaults() -> None:
    data = {"resource_pools": [gcp_pool(zone=["us-central1-a", "us-central1-b"], spot=True)]}
    pool = load_cluster_config(dump(data)).config.default_pool
    provider = pool.provider
    assert isinstance(provider, GcpProvider)
    assert provider.network_interface.network == "global/networks/default"
    assert provider.service_account.scopes == ("https://www.googleapis.com/auth/cloud-platform",)
    assert provider.operation_timeout_period == 300.0
    assert pool.ownership == Ownership("managed-by", "corral")
    offerings = pool.offerings()
    assert len(offerings) == 4
    assert offerings[0].instance_type == "n1-standard-8+2xnvidia-tesla-t4"
    assert offerings[0].slots == 2
    assert offerings[0].hourly_price == pytest.approx(0.08 + 2 * 0.11)
    assert offerings[2].hourly_price == pytest.approx(0.38 + 2 * 0.35)
    assert provider.instance_type_for(offerings[0].instance_type).gpu_num == 2


def test_gcp_several_machine_types_and_preemptible_means_spot() -> None:
    data = {
        "resource_pools": [
            gcp_pool(
                instance_type=[
                    {"machine_type": "a2-highgpu-1g"},
                    {"machine_type": "g2-standard-24", "preemptible": True},
                ],
                on_demand_fallback=False,
            )
        ]
    }
    pool = load_cluster_config(dump(data)).config.default_pool
    assert [(o.instance_type, o.slots, o.capacity_type.value) for o in pool.offerings()] == [
        ("g2-standard-24", 2, "spot"),
        ("a2-highgpu-1g", 1, "on-demand"),
    ]
    assert pool.is_spot


@pytest.mark.parametrize(
    ("instance_type", "message"),
    [
        (
            {"machine_type": "n1-standard-8", "gpu_type": "nvidia-tesla-t4", "gpu_num": 8},
            "instance_type.gpu_num: must be 1, 2 or 4 for nvidia-tesla-t4 (GCE limit)",
        ),
        (
            {"machine_type": "a3-highgpu-8g", "gpu_type": "nvidia-h100-80gb", "gpu_num": 4},
            "instance_type.gpu_num: a3-highgpu-8g comes with exactly 8 GPUs",
        ),
        (
            {"machine_type": "n1-standard-8", "gpu_type": "nvidia-tesla-a100", "gpu_num": 1},
            "instance_type.gpu_type: nvidia-tesla-a100 cannot be attached to n1-standard-8; use "
            "a machine type that has it built in (a2, g2, g4, a3, a4, a4x)",
        ),
        (
            {"machine_type": "n1-standard-8", "gpu_num": 2},
            "instance_type.gpu_type: required when gpu_num is set",
        ),
        (
            [{"machine_type": "n1-standard-8"}, {"gpu_type": "nvidia-tesla-x"}],
            "instance_type[1].gpu_type: must be 'nvidia-tesla-t4', 'nvidia-tesla-p4', "
            "'nvidia-tesla-p100', 'nvidia-tesla-v100', 'nvidia-tesla-k80', 'nvidia-tesla-a100', "
            "'nvidia-a100-80gb', 'nvidia-l4', 'nvidia-rtx-pro-6000', 'nvidia-h100-80gb', "
            "'nvidia-h100-mega-80gb', 'nvidia-h200-141gb', 'nvidia-b200' or 'nvidia-gb200'",
        ),
    ],
)
def test_gcp_gpu_rules(instance_type: Any, message: str) -> None:
    data = {"resource_pools": [gcp_pool(instance_type=instance_type)]}
    assert cluster_problems(data) == [f"resource_pools[0].provider.{message}"]


def test_gcp_label_and_name_rules() -> None:
    data = {
        "resource_pools": [
            gcp_pool(
                label_key="Managed-By",
                name_prefix="9agent",
                zone="us-central1",
                labels={"team": "ML"},
                project="x",
            )
        ]
    }
    assert cluster_problems(data) == [
        "resource_pools[0].provider.project: must be a GCP project id such as my-project-123, "
        "got 'x'",
        "resource_pools[0].provider.zone: must be a GCE zone such as us-central1-a, "
        "got 'us-central1'",
        "resource_pools[0].provider.label_key: must be a GCP label key (lowercase letters, "
        "digits, '_' and '-', at most 63 characters, starting with a letter)",
        "resource_pools[0].provider.name_prefix: must start with a lowercase letter and use "
        "only lowercase letters, digits and '-', at most 50 characters",
        "resource_pools[0].provider.labels.team: must be a GCP label value (lowercase "
        "letters, digits, '_' and '-', at most 63 characters)",
    ]
    bad_label = {"resource_pools": [gcp_pool(labels={"team": "ML"})]}
    assert cluster_problems(bad_label) == [
        "resource_pools[0].provider.labels.team: must be a GCP label value (lowercase "
        "letters, digits, '_' and '-', at most 63 characters)"
    ]


def test_gcp_pool_name_must_be_label_safe() -> None:
    pool = gcp_pool()
    pool["name"] = "GPU.Pool"
    assert cluster_problems({"resource_pools": [pool]}) == [
        "resource_pools[0].name: must be a valid GCP label value (lowercase letters, digits, "
        "'_' and '-', at most 63 characters): it labels instances"
    ]


# --- files


def test_example_cluster_loads() -> None:
    loaded = load_cluster_config(EXAMPLES / "cluster.yaml")
    assert [w.split(":")[0] for w in loaded.warnings] == [
        f"resource_pools[{i}].provider.iam_instance_profile_arn" for i in (0, 1)
    ]
    config = loaded.config
    assert isinstance(config, ClusterConfig)
    pool = config.default_pool
    assert pool.name == "default"
    assert pool.is_spot and pool.on_demand_fallback
    assert (pool.min_instances, pool.max_instances, pool.max_idle_s) == (0, 4, 30.0)
    assert pool.starting_deadline_s == 120.0
    assert pool.monthly_budget_usd == 500
    assert {o.slots for o in pool.offerings()} == {1, 4}


def test_path_string_and_missing_file(tmp_path: Path) -> None:
    good = tmp_path / "c.yaml"
    good.write_text(dump(one_pool()))
    assert load_cluster_config(str(good)).config.pool_names == ("default",)
    with pytest.raises(ConfigError) as info:
        load_cluster_config(str(tmp_path / "missing.yaml"))
    assert str(info.value) == "no such file"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("resource_pools: [\n  {name: a\n", "invalid YAML at line 3, column 1"),
        ("a: 1\na: 2\n", "invalid YAML at line 2, column 1: duplicate key 'a'"),
        ("", "is empty"),
        ("- 1\n- 2\n", "must be a mapping, not a list"),
    ],
)
def test_yaml_problems(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_cluster_config(text)
    assert len(info.value.problems) == 1
    assert info.value.problems[0].path == ""
    assert info.value.problems[0].reason.startswith(message)
