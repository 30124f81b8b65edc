from ascend_fleet.api.settings import OperatorSettings
from ascend_fleet.reconcile.apply import with_default_image


def body(chip="ascend910b", image=None):
    engine = {"type": "vllm-ascend", **({"image": image} if image else {})}
    return {"spec": {"engine": engine, "hardware": {"chip": chip}}}


SETTINGS = OperatorSettings(images={"vllm-ascend": "reg/vllm:1", "vllm-ascend/ascend910_93": "reg/vllm:1-a3"})


def test_engine_key_fills_in_a_missing_image():
    assert with_default_image(body(), SETTINGS)["spec"]["engine"]["image"] == "reg/vllm:1"


def test_chip_specific_key_wins():
    assert with_default_image(body("ascend910_93"), SETTINGS)["spec"]["engine"]["image"] == "reg/vllm:1-a3"


def test_a_spec_image_is_never_replaced():
    assert with_default_image(body(image="mine:2"), SETTINGS)["spec"]["engine"]["image"] == "mine:2"


def test_no_configured_default_keeps_the_upstream_one():
    original = body()
    assert with_default_image(original, OperatorSettings()) is original


def test_the_default_picker_is_the_projects_of_this_release():
    """Unset or empty, the operator runs the project's picker image of its own version; a name set is kept."""
    from ascend_fleet import __version__
    from ascend_fleet.api.images import DEFAULT_PICKER_IMAGE

    assert f"ghcr.io/ascend-fleet/picker:{__version__}" == DEFAULT_PICKER_IMAGE
    assert OperatorSettings().routing.picker_image == DEFAULT_PICKER_IMAGE
    assert OperatorSettings.model_validate({"routing": {"pickerImage": ""}}).routing.picker_image == (
        DEFAULT_PICKER_IMAGE
    )
    mirrored = OperatorSettings.model_validate({"routing": {"pickerImage": "mirror.example/epp:1"}})
    assert mirrored.routing.picker_image == "mirror.example/epp:1"
