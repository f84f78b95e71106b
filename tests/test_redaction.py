"""Secrets go only where they belong: credentials in an address are refused in the config (it is recorded)
and redacted wherever an address from the environment is printed; the Tinker key goes over plain http only
to this machine or to a host the user names."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from deployments import load_recipe
from schemas import describe_errors
from schemas.secrets import MissingSecretError, redact, tinker_base_url_with_source

SECRET = "s3cr3t-pw"


def test_redact_hides_userinfo_and_secret_query_values() -> None:
    text = f"at https://bob:{SECRET}@mlflow.example.com/x?token={SECRET}&y=1 and ray://u:{SECRET}@h:10001 or sqlite:///a.db"
    out = redact(text)
    assert SECRET not in out and "bob" not in out
    assert "https://***@mlflow.example.com/x?token=***&y=1" in out and "sqlite:///a.db" in out


@pytest.mark.parametrize("path", ["monitor.tracking_uri", "cluster.ray_address"])
def test_credentials_in_a_config_address_are_refused_by_field(path: str) -> None:
    value = f"http://bob:{SECRET}@10.0.0.1:5000" if path == "monitor.tracking_uri" else f"ray://bob:{SECRET}@10.0.0.1:10001"
    with pytest.raises(ValidationError) as err:
        load_recipe("smoke").with_overrides({path: value})
    lines = describe_errors(err.value)
    assert any(line.startswith(f"{path}: ") and "credentials" in line for line in lines), lines
    assert SECRET not in "\n".join(lines)


def test_preflight_prints_an_mlflow_uri_from_the_environment_without_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    from preflight.services import check_tracking_uri

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://bob:{SECRET}@127.0.0.1:9")  # nothing listens on port 9
    with pytest.raises(Exception) as err:
        check_tracking_uri(load_recipe("smoke"))
    assert "127.0.0.1:9" in str(err.value) and SECRET not in str(err.value)


def tinker(url: str):
    return load_recipe("gsm8k-tinker").with_overrides({"trainer.base_url": url})


def test_the_tinker_key_goes_over_plain_http_only_to_loopback_or_a_named_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TINKER_PLAIN_HTTP_HOST", raising=False)
    with pytest.raises(ValidationError) as err:
        tinker("http://10.0.0.7:8000")
    assert any(line.startswith("trainer.base_url: ") and "TINKER_PLAIN_HTTP_HOST" in line
               for line in describe_errors(err.value))
    assert tinker("https://tinker.example.com").trainer.base_url == "https://tinker.example.com"
    assert tinker("http://127.0.0.1:8000").trainer.base_url == "http://127.0.0.1:8000"
    monkeypatch.setenv("TINKER_PLAIN_HTTP_HOST", "10.0.0.7")
    assert tinker("http://10.0.0.7:8000").trainer.base_url == "http://10.0.0.7:8000"
    monkeypatch.delenv("TINKER_PLAIN_HTTP_HOST")
    monkeypatch.setenv("TINKER_BASE_URL", "http://10.0.0.7:8000")  # the environment's address is checked too
    with pytest.raises(MissingSecretError, match="TINKER_BASE_URL"):
        tinker_base_url_with_source(None)


def test_the_mlflow_spool_and_the_ray_probe_print_addresses_without_their_password(
    tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture
) -> None:
    import logging

    import tracking
    from backends.errors import ConfigError
    from backends.local.ray_cluster import probe

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://bob:{SECRET}@127.0.0.1:9")  # nothing listens on port 9
    config = load_recipe("smoke").with_overrides({"checkpoint_root_dir": str(tmp_path)})
    with caplog.at_level(logging.WARNING, logger="tracking.spool"):
        tracking.log_metrics(config, "run-1", {"train/loss": 1.0}, step=1)  # kept in the spool, with a warning
    warned = "\n".join(record.getMessage() for record in caplog.records) + capfd.readouterr().err  # Prefect's handler
    assert "MLflow at http://***@127.0.0.1:9 does not answer" in warned and SECRET not in warned and "bob" not in warned
    assert SECRET not in (config.experiment_dir / "log" / tracking.SPOOL).read_text()

    monkeypatch.setenv("RAY_ADDRESS", f"ray://bob:{SECRET}@127.0.0.1:9")
    with pytest.raises(ConfigError) as err:
        probe("auto")
    assert err.value.field == "RAY_ADDRESS" and "127.0.0.1:9" in str(err.value) and SECRET not in str(err.value)
