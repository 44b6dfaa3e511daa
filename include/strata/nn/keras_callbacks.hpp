#pragma once
//! The Keras callbacks, all of them: EarlyStopping, ModelCheckpoint,
//! CSVLogger, ReduceLROnPlateau, LearningRateScheduler, TerminateOnNaN
//! (TensorBoard: nn/tensorboard.hpp; BackupAndRestore: nn/backup_and_restore.hpp).
//!   #include <strata/nn/keras_callbacks.hpp>

#include <strata/nn/csv_logger.hpp>
#include <strata/nn/early_stopping.hpp>
#include <strata/nn/lr_callbacks.hpp>
#include <strata/nn/model_checkpoint.hpp>
#include <strata/nn/terminate_on_nan.hpp>
