"""Integer transformer kernels on the vector unit: an int reference each, lowered to VECTOR/TABLE/TRANSPOSE."""

from .base import Consts, Kernel, Mem
from .kernels import MASKED, P_ONE, LayerNorm, Softmax, TableMap, Transpose
from .tables import FUNCTIONS, Table, TableAccuracy, exp_table, map_table, table_accuracy

__all__ = ["Consts", "Kernel", "Mem", "MASKED", "P_ONE", "LayerNorm", "Softmax", "TableMap", "Transpose", "FUNCTIONS",
           "Table", "TableAccuracy", "exp_table", "map_table", "table_accuracy"]
