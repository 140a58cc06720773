"""spark-submit entry point of patient_monitoring v2 (heart rate, peak temperatures, alerts).

    spark-submit spark_apps/patient_monitoring_v2/app.py \
        --spec spark_apps/patient_monitoring_v2/patient_monitoring_v2.toml
"""

import sys
from pathlib import Path

from statekeeper.app.launcher import main

if __name__ == "__main__":
    sys.exit(main(default_spec=Path(__file__).with_name("patient_monitoring_v2.toml")))
